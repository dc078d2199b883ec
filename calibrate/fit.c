#include "fit.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"

typedef struct {
    est_record *recs;
    size_t n, cap;
} record_list;

static int load_records(const char *path, const est_gpu_catalog *cat, record_list *list,
                        FILE *log, char *err, size_t errlen) {
    size_t len = 0;
    char *text = ft_read_file(path, (size_t)1 << 30, &len, err, errlen);
    if (!text) return -1;
    size_t lineno = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        lineno++;
        if (!*line) continue;
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
        if (est_record_parse(line, strlen(line), cat, &list->recs[list->n], msg, sizeof msg) < 0) {
            fprintf(log, "  skipping %s:%zu: %s\n", path, lineno, msg);
            continue;
        }
        list->n++;
    }
    free(text);
    return 0;
}

/* Runs every fitter over one group into `section`. */
static int fit_group(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen) {
    if (cal_fit_memory(g, section, log, err, errlen) < 0) return -1;
    return cal_fit_time(g, section, log, err, errlen);
}

static int write_profile(const char *dir, est_framework fw, cJSON *root, char *err, size_t errlen) {
    char path[PATH_MAX], tmp[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s.json", dir, est_framework_name(fw));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char *text = cJSON_Print(root);
    if (!text) return ft_errorf(err, errlen, "out of memory");
    FILE *f = fopen(tmp, "w");
    if (!f) {
        free(text);
        return ft_errorf(err, errlen, "cannot write %s", tmp);
    }
    bool ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    ok = (fclose(f) == 0) && ok;
    free(text);
    /* Write then rename, so an interrupted fit never leaves half a profile. */
    if (!ok || rename(tmp, path) != 0) return ft_errorf(err, errlen, "cannot write %s", path);
    return 0;
}

int cal_fit_files(char (*files)[1024], int nfiles, const est_gpu_catalog *cat, const char *out_dir,
                  FILE *log, char *err, size_t errlen) {
    record_list list = {0};
    char names[512] = "";
    int rc = 0;
    for (int i = 0; i < nfiles && rc == 0; i++) {
        rc = load_records(files[i], cat, &list, log, err, errlen);
        const char *base = strrchr(files[i], '/');
        strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
        strncat(names, base ? base + 1 : files[i], sizeof names - strlen(names) - 1);
    }
    const est_record **sel = rc == 0 ? malloc((list.n ? list.n : 1) * sizeof *sel) : NULL;
    if (rc == 0 && !sel) rc = ft_errorf(err, errlen, "out of memory");

    for (int fw = EST_FW_FTRAIN; rc == 0 && fw <= EST_FW_FSDP; fw++) {
        size_t n = 0;
        for (size_t i = 0; i < list.n; i++)
            if ((int)list.recs[i].run.framework == fw) sel[n++] = &list.recs[i];
        if (n == 0) continue;
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "schema", "ftest.profile/1");
        cJSON_AddStringToObject(root, "framework", est_framework_name((est_framework)fw));
        cJSON_AddStringToObject(root, "fitted_by", "ftest fit");
        cJSON_AddStringToObject(root, "records", names);
        cJSON *all = cJSON_AddObjectToObject(root, "constants");
        cJSON *gpus = cJSON_AddObjectToObject(root, "gpus");
        fprintf(log, "%s: %zu records\n", est_framework_name((est_framework)fw), n);
        cal_group g = {.records = sel, .count = n, .gpu = NULL, .files = names};
        rc = fit_group(&g, all, log, err, errlen);
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
            cal_group gg = {.records = sel + i, .count = m, .gpu = gpu, .files = names};
            rc = fit_group(&gg, sec, log, err, errlen);
            if (cJSON_GetArraySize(sec) > 0) cJSON_AddItemToObject(gpus, gpu, sec);
            else cJSON_Delete(sec);
            i += m;
        }
        if (rc == 0 && (cJSON_GetArraySize(all) > 0 || cJSON_GetArraySize(gpus) > 0))
            rc = write_profile(out_dir, (est_framework)fw, root, err, errlen);
        cJSON_Delete(root);
    }
    free(sel);
    for (size_t i = 0; i < list.n; i++) est_record_free(&list.recs[i]);
    free(list.recs);
    return rc;
}
