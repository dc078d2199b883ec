/* After a sweep: the fit of its records (when they determine a constant) and
 * their check (calibrate_sweep.h). */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calibrate_sweep.h"
#include "check_records.h"
#include "fit.h"
#include "json_util.h"

/* Fit (unless the records determine nothing) and check. */
int cal_fit_and_check(const cal_options *o, const est_gpu_catalog *cat, FILE *out, FILE *log,
                         cal_summary *sum, char *err, size_t errlen) {
    if (access(o->out, F_OK) != 0) {
        fprintf(log, "no records in %s: nothing to fit or check\n", o->out);
        return 0;
    }
    char files[1][1024];
    ft_strlcpy(files[0], o->out, sizeof files[0]);
    char dir[1100];
    if (o->profiles[0]) {
        ft_strlcpy(dir, o->profiles, sizeof dir);
    } else {
        ft_strlcpy(dir, o->out, sizeof dir);
        char *slash = strrchr(dir, '/');
        if (slash) slash[1] = '\0';
        else dir[0] = '\0';
        strncat(dir, "profiles", sizeof dir - strlen(dir) - 1);
    }
    char why[256];
    if (cal_fit_guard(files, 1, cat, why, sizeof why) < 0) {
        fprintf(log, "fit: nothing fitted: %s\n", why);
    } else {
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return ft_errorf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        char names[256];
        int n = cal_fit_files(files, 1, cat, dir, log, names, sizeof names, err, errlen);
        if (n < 0) return -1;
        sum->fitted = n > 0;
        if (n > 0)
            fprintf(log, "fit: %s written to %s (copy them into calibrate/profiles to use them)\n",
                    names, dir);
        else
            fprintf(log, "fit: nothing fitted\n");
    }
    est_check_totals tot = {0};
    est_check_options opt = {.quiet = o->quiet};
    if (est_check_file(o->out, cat, &opt, out, &tot, err, errlen) < 0) return -1;
    sum->checked = tot.records;
    sum->check_failed = tot.failed;
    sum->check_errors = tot.errors;
    fprintf(out, "\ncheck: %zu records, %zu outside tolerance, %zu unreadable\n", tot.records,
            tot.failed, tot.errors);
    return 0;
}

