#include "record_steps.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "json_util.h"

/* The allocator's figures of one memory_by_step entry (calibrate/probes/
 * probe_steps.py: torch.cuda.memory_stats() after the step). */
static const char *const memory_step_keys[] = {
    "allocated_bytes", "active_bytes", "reserved_bytes", "peak_allocated_bytes",
    "peak_active_bytes", "peak_reserved_bytes", "num_alloc_retries", "num_device_alloc",
    "num_device_free"};

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const cJSON *array_field(const cJSON *obj, const char *key, int *n, char *err,
                                size_t errlen) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    *n = 0;
    if (!it || cJSON_IsNull(it)) return NULL;
    if (!cJSON_IsArray(it)) {
        *n = -1;
        ft_errorf(err, errlen, "%s must be an array", key);
        return NULL;
    }
    *n = cJSON_GetArraySize(it);
    if (*n > EST_RECORD_STEPS_MAX) {
        ft_errorf(err, errlen, "%s has %d entries, more than %d", key, *n,
                  EST_RECORD_STEPS_MAX);
        *n = -1;
        return NULL;
    }
    return it;
}

/* The steady steps' median and spread, from a sorted copy. */
static int steady_summary(const cJSON *arr, int n, est_record_steps *s, char *err, size_t errlen) {
    int m = n - s->warmup;
    double *v = malloc((size_t)m * sizeof *v);
    if (!v) return ft_errorf(err, errlen, "out of memory");
    int i = 0;
    for (const cJSON *t = arr->child; t; t = t->next, i++)
        if (i >= s->warmup) v[i - s->warmup] = t->valuedouble;
    qsort(v, (size_t)m, sizeof *v, cmp_double);
    s->steady_median_s = m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
    s->steady_min_s = v[0];
    s->steady_max_s = v[m - 1];
    free(v);
    return 0;
}

static int parse_times(const cJSON *meas, est_record_steps *s, char *err, size_t errlen) {
    int n;
    const cJSON *arr = array_field(meas, "step_times_s", &n, err, errlen);
    if (n < 0) return -1;
    int64_t warmup = 0;
    int has_warmup = ft_json_int64(meas, "warmup_steps", 0, EST_RECORD_STEPS_MAX, &warmup, err,
                                   errlen);
    if (has_warmup < 0) return -1;
    if (!arr) {
        if (has_warmup) return ft_errorf(err, errlen, "measured.warmup_steps needs step_times_s");
        return 0;
    }
    if (n < 1) return ft_errorf(err, errlen, "measured.step_times_s is empty");
    if (warmup >= n)
        return ft_errorf(err, errlen, "measured.warmup_steps = %lld leaves none of the %d "
                         "step_times_s", (long long)warmup, n);
    for (const cJSON *t = arr->child; t; t = t->next)
        if (!cJSON_IsNumber(t) || !isfinite(t->valuedouble) || t->valuedouble <= 0 ||
            t->valuedouble > 1e9)
            return ft_errorf(err, errlen, "measured.step_times_s must hold positive seconds");
    s->times = n;
    s->warmup = (int32_t)warmup;
    return steady_summary(arr, n, s, err, errlen);
}

static int parse_flags(const cJSON *meas, const char *key, int32_t *steps, int32_t *set,
                       char *err, size_t errlen) {
    int n;
    const cJSON *arr = array_field(meas, key, &n, err, errlen);
    if (n < 0) return -1;
    if (!arr) return 0;
    *steps = n;
    *set = 0;
    for (const cJSON *f = arr->child; f; f = f->next) {
        if (!cJSON_IsBool(f))
            return ft_errorf(err, errlen, "measured.%s must hold true or false per step", key);
        *set += cJSON_IsTrue(f) ? 1 : 0;
    }
    return 0;
}

int est_record_parse_steps(const cJSON *meas, est_record_steps *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->steady_median_s = s->steady_min_s = s->steady_max_s = NAN;
    s->overflow_steps = s->padded_steps = -1;
    if (parse_times(meas, s, err, errlen) < 0 ||
        parse_flags(meas, "step_overflow", &s->overflow_steps, &s->overflowed, err, errlen) < 0 ||
        parse_flags(meas, "step_padded", &s->padded_steps, &s->padded, err, errlen) < 0)
        return -1;
    return 0;
}

static int parse_memory_entry(const cJSON *e, int64_t *last, char *err, size_t errlen) {
    if (!cJSON_IsObject(e)) return ft_errorf(err, errlen, "memory_by_step must hold objects");
    int64_t step = 0, v;
    if (ft_json_int64(e, "step", 1, EST_RECORD_STEPS_MAX, &step, err, errlen) < 0) return -1;
    if (step <= *last)
        return ft_errorf(err, errlen, "memory_by_step: step %lld does not follow step %lld",
                         (long long)step, (long long)*last);
    *last = step;
    for (size_t k = 0; k < sizeof memory_step_keys / sizeof *memory_step_keys; k++)
        if (ft_json_int64(e, memory_step_keys[k], 0, INT64_C(1) << 60, &v, err, errlen) < 0)
            return -1;
    return 0;
}

int est_record_parse_memory_steps(const cJSON *rank, int32_t *entries, char *err, size_t errlen) {
    int n;
    *entries = 0;
    const cJSON *arr = array_field(rank, "memory_by_step", &n, err, errlen);
    if (n < 0) return -1;
    if (!arr) return 0;
    int64_t last = 0;
    for (const cJSON *e = arr->child; e; e = e->next)
        if (parse_memory_entry(e, &last, err, errlen) < 0) return -1;
    *entries = n;
    return 0;
}
