#include "fit.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "constants.h"
#include "file_io.h"
#include "fw_registry.h"
#include "json_util.h"

typedef struct {
    est_record *recs;
    size_t n, cap;
} record_list;

static int load_records(const char *path, const est_gpu_catalog *cat, record_list *list,
                        FILE *log, char *err, size_t errlen) {
    size_t len = 0;
    char *text = ft_read_file(path, (size_t)1 << 28, &len, err, errlen);
    if (!text) return -1;
    size_t lineno = 0;
    char dir[PATH_MAX];
    est_record_dir(path, dir, sizeof dir);
    for (char *line = text, *end = text + len, *next; line < end; line = next) {
        size_t ll = ft_cut_line(line, end, &next);
        lineno++;
        if (!ll) continue;
        if (strlen(line) != ll) { /* never let a NUL byte hide the rest of a line */
            fprintf(log, "  skipping %s:%zu: the line holds a NUL byte\n", path, lineno);
            continue;
        }
        if (list->n == list->cap) {
            size_t cap = list->cap ? list->cap * 2 : 256;
            est_record *nr = realloc(list->recs, cap * sizeof *nr);
            if (!nr) {
                free(text);
                return ft_errorf(err, errlen, "out of memory");
            }
            list->recs = nr;
            list->cap = cap;
        }
        char msg[256];
        if (est_record_parse_at(line, ll, cat, dir, &list->recs[list->n], msg, sizeof msg) < 0) {
            fprintf(log, "  skipping %s:%zu: %s\n", path, lineno, msg);
            continue;
        }
        if (!list->recs[list->n].final) { /* an ftrain window record: its final record counts */
            est_record_free(&list->recs[list->n]);
            continue;
        }
        /* A repeat at the end of its probe process (--repeat-short, docs/records.md)
         * measures the drift of its point's time; the point's own record is the one
         * fitted, so that each configuration counts once. */
        if (list->recs[list->n].repeat_of[0]) {
            est_record_free(&list->recs[list->n]);
            continue;
        }
        /* A cpu-trace record holds the framework's tensors only: no allocator,
         * no CUDA context, no time, so no constant here is fitted from it. */
        if (list->recs[list->n].cpu_trace) {
            est_record_free(&list->recs[list->n]);
            continue;
        }
        if (list->recs[list->n].not_expressible[0]) { /* a stand-in would fit the wrong run */
            fprintf(log, "  leaving out %s:%zu: not expressible: %s\n", path, lineno,
                    list->recs[list->n].not_expressible);
            est_record_free(&list->recs[list->n]);
            continue;
        }
        list->n++;
    }
    free(text);
    return 0;
}

/* The profiles of one fit, held until all are fitted and then committed as one set. */
typedef struct {
    char names[8][32];
    char *texts[8];
    int n;
} profile_set;

static int add_profile(profile_set *set, const char *name, cJSON *root, char *err, size_t errlen) {
    if (set->n == 8) return ft_errorf(err, errlen, "too many profiles");
    char *text = cJSON_Print(root);
    if (!text) return ft_errorf(err, errlen, "out of memory");
    size_t len = strlen(text);
    char *t = realloc(text, len + 2); /* a newline at the end, as editors leave it */
    if (!t) {
        free(text);
        return ft_errorf(err, errlen, "out of memory");
    }
    t[len] = '\n';
    t[len + 1] = '\0';
    snprintf(set->names[set->n], sizeof set->names[0], "%s.json", name);
    set->texts[set->n++] = t;
    return 0;
}

/* The constants of the common profile just written (the set's first), parsed
 * back; NULL when it has none. */
static cJSON *common_section(const profile_set *set) {
    cJSON *root = cJSON_Parse(set->texts[0]);
    cJSON *c = root ? cJSON_DetachItemFromObjectCaseSensitive(root, "constants") : NULL;
    cJSON_Delete(root);
    return c;
}

typedef int (*cal_fitter)(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen);

/* Fits `sel` (reordered in place) as a whole and per GPU with `fit`, and writes
 * profile `name` when anything was fitted. */
static int fit_profile(const char *name, const est_record **sel, size_t n, cal_fitter fit,
                       const char *files, const cJSON *common, profile_set *set, FILE *log,
                       char *err, size_t errlen) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "ftest.profile/1");
    cJSON_AddStringToObject(root, "profile", name);
    cJSON_AddStringToObject(root, "fitted_by", "ftest fit");
    cJSON_AddStringToObject(root, "records", files);
    cJSON *all = cJSON_AddObjectToObject(root, "constants");
    cJSON *gpus = cJSON_AddObjectToObject(root, "gpus");
    fprintf(log, "%s: %zu records\n", name, n);
    cal_group g = {.records = sel, .count = n, .gpu = NULL, .files = files, .common = common};
    int rc = fit(&g, all, log, err, errlen);
    /* Then per GPU: the records of one GPU at a time, moved to the front. */
    for (size_t i = 0; rc == 0 && i < n;) {
        const char *gpu = sel[i]->run.gpu.name;
        size_t m = 0;
        for (size_t j = i; j < n; j++)
            if (!strcmp(sel[j]->run.gpu.name, gpu)) {
                const est_record *t = sel[i + m];
                sel[i + m] = sel[j];
                sel[j] = t;
                m++;
            }
        cJSON *sec = cJSON_CreateObject();
        cal_group gg = {.records = sel + i, .count = m, .gpu = gpu, .files = files, .framework = all,
                        .common = common};
        rc = fit(&gg, sec, log, err, errlen);
        if (cJSON_GetArraySize(sec) > 0) cJSON_AddItemToObject(gpus, gpu, sec);
        else cJSON_Delete(sec);
        i += m;
    }
    if (rc == 0 && (cJSON_GetArraySize(all) > 0 || cJSON_GetArraySize(gpus) > 0))
        rc = add_profile(set, name, root, err, errlen);
    cJSON_Delete(root);
    return rc;
}

/* A framework's profile: its time constants and its module images. */
static int fit_framework(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen) {
    if (cal_fit_time(g, section, log, err, errlen) < 0) return -1;
    return cal_fit_context(g, section, log, err, errlen);
}

int cal_fit_files(char (*files)[1024], int nfiles, const est_gpu_catalog *cat, const char *out_dir,
                  FILE *log, char *written, size_t written_len, char *err, size_t errlen) {
    record_list list = {0};
    profile_set set = {0};
    char names[512] = "";
    int rc = 0;
    for (int i = 0; i < nfiles && rc == 0; i++) {
        const size_t before = list.n;
        rc = load_records(files[i], cat, &list, log, err, errlen);
        if (list.n == before) continue; /* a file nothing is fitted from (cpu-trace) is not named */
        const char *base = strrchr(files[i], '/');
        strncat(names, names[0] ? ", " : "", sizeof names - strlen(names) - 1);
        strncat(names, base ? base + 1 : files[i], sizeof names - strlen(names) - 1);
    }
    const est_record **sel = rc == 0 ? malloc((list.n ? list.n : 1) * sizeof *sel) : NULL;
    if (rc == 0 && !sel) rc = ft_errorf(err, errlen, "out of memory");

    /* The caching allocator is simulated (estimator/ledger/caching_allocator.c):
     * nothing of it is fitted. The host's cost per op is common to the PyTorch
     * stacks (profile "pytorch", read before each framework's); the other time
     * constants belong to each framework. */
    size_t n = 0;
    const est_framework *fws;
    const size_t nfw = est_fw_all(&fws);
    cJSON *common = NULL;
    for (size_t i = 0; rc == 0 && i < list.n; i++)
        if (est_fw_of(&list.recs[i].run)->torch_stack) sel[n++] = &list.recs[i];
    if (rc == 0 && n > 0) {
        rc = fit_profile(EST_COMMON_PROFILE, sel, n, cal_fit_host_ops, names, NULL, &set, log, err, errlen);
        common = rc == 0 && set.n > 0 ? common_section(&set) : NULL;
    }
    for (size_t f = 0; rc == 0 && f < nfw; f++) {
        n = 0;
        for (size_t i = 0; i < list.n; i++)
            if (list.recs[i].run.framework == fws[f]) sel[n++] = &list.recs[i];
        if (n > 0)
            rc = fit_profile(est_framework_name(fws[f]), sel, n, fit_framework, names, common, &set, log, err,
                             errlen);
    }
    cJSON_Delete(common);
    free(sel);
    for (size_t i = 0; i < list.n; i++) est_record_free(&list.recs[i]);
    free(list.recs);
    if (written && written_len) written[0] = '\0';
    if (rc == 0 && set.n > 0) {
        const char *nm[8], *tx[8];
        for (int i = 0; i < set.n; i++) {
            nm[i] = set.names[i];
            tx[i] = set.texts[i];
            if (written && written_len) {
                strncat(written, i ? ", " : "", written_len - strlen(written) - 1);
                strncat(written, set.names[i], written_len - strlen(written) - 1);
            }
        }
        rc = ft_replace_dir(out_dir, nm, tx, set.n, err, errlen);
    }
    for (int i = 0; i < set.n; i++) free(set.texts[i]);
    return rc < 0 ? -1 : set.n;
}
