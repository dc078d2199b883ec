#include "format.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#define GIB 1073741824.0
#define MIB 1048576.0

const char *est_fmt_bytes(int64_t bytes, char *buf, size_t n) {
    double b = (double)bytes;
    if (bytes < 0) {
        snprintf(buf, n, "-%s", est_fmt_bytes(-bytes, buf + 1, n - 1));
        return buf;
    }
    if (b >= GIB) snprintf(buf, n, "%.2f GiB", b / GIB);
    else if (b >= MIB) snprintf(buf, n, "%.1f MiB", b / MIB);
    else if (b >= 1024) snprintf(buf, n, "%.1f KiB", b / 1024);
    else snprintf(buf, n, "%" PRId64 " B", bytes);
    return buf;
}

const char *est_fmt_count(double v, char *buf, size_t n) {
    static const struct {
        double scale;
        char suffix;
    } units[] = {{1e12, 'T'}, {1e9, 'B'}, {1e6, 'M'}, {1e3, 'K'}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (fabs(v) >= units[i].scale) {
            snprintf(buf, n, "%.4g%c", v / units[i].scale, units[i].suffix);
            return buf;
        }
    snprintf(buf, n, "%.4g", v);
    return buf;
}

const char *est_gpus_word(int64_t count) { return count == 1 ? "GPU" : "GPUs"; }
