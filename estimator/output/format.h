/* How figures are written for people: bytes, counts, "GPU"/"GPUs". Shared
 * by the reports and by the searches that print their answers. */
#ifndef EST_FORMAT_H
#define EST_FORMAT_H

#include <stddef.h>
#include <stdint.h>

/* "45.31 GiB" style: GiB above 1 GiB, else MiB, else KiB/bytes. */
const char *est_fmt_bytes(int64_t bytes, char *buf, size_t n);

/* A count with the suffixes --tokens accepts (K, M, B, T: 1e3..1e12), so what
 * is printed can be typed back: 3e8 -> "300M", 1.5e9 -> "1.5B", 512 -> "512". */
const char *est_fmt_count(double v, char *buf, size_t n);

/* "GPU" or "GPUs" for a count. */
const char *est_gpus_word(int64_t count);

#endif
