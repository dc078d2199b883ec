#include "instances.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "model_config.h"

#define CATALOG_MAX_BYTES ((size_t)8 << 20)

static int req_string(const cJSON *o, const char *key, char *out, size_t n, char *err, size_t errlen) {
    int r = ft_json_string(o, key, out, n, err, errlen);
    if (r < 0) return -1;
    if (r == 0 || !out[0]) return ft_errorf(err, errlen, "lacks \"%s\"", key);
    return 0;
}

static int req_double(const cJSON *o, const char *key, double min, double max, double *out,
                      char *err, size_t errlen) {
    int r = ft_json_double(o, key, min, max, out, err, errlen);
    if (r < 0) return -1;
    if (r == 0) return ft_errorf(err, errlen, "lacks \"%s\"", key);
    return 0;
}

static int req_int(const cJSON *o, const char *key, int64_t min, int64_t max, int64_t *out,
                   char *err, size_t errlen) {
    int r = ft_json_int64(o, key, min, max, out, err, errlen);
    if (r < 0) return -1;
    if (r == 0) return ft_errorf(err, errlen, "lacks \"%s\"", key);
    return 0;
}

/* The host of the CPU optimizer under offload (optional, for users' own
 * catalogs): host_cores and host_mem_gb_per_s, with a host_source when given. */
static int parse_host(const cJSON *o, est_instance *in, char *err, size_t errlen) {
    in->host_cores = 0;
    in->host_mem_gb_per_s = 0;
    if (ft_json_int64(o, "host_cores", 1, 1 << 16, &in->host_cores, err, errlen) < 0) return -1;
    int r = ft_json_double(o, "host_mem_gb_per_s", 0, 1e5, &in->host_mem_gb_per_s, err, errlen);
    if (r < 0) return -1;
    if (r == 1 && !(in->host_mem_gb_per_s > 0)) return ft_errorf(err, errlen, "\"host_mem_gb_per_s\" must be positive");
    if (in->host_cores > 0 || in->host_mem_gb_per_s > 0) {
        char src[512];
        if (req_string(o, "host_source", src, sizeof src, err, errlen) < 0) return -1;
    }
    return 0;
}

static int parse_one(const cJSON *o, const est_gpu_catalog *gpus, est_instance *in, char *err,
                     size_t errlen) {
    char gpu[EST_GPU_NAME_MAX], ic[16];
    if (req_string(o, "provider", in->provider, sizeof in->provider, err, errlen) < 0) return -1;
    if (req_string(o, "gpu", gpu, sizeof gpu, err, errlen) < 0) return -1;
    const est_gpu *g = est_gpu_find(gpus, gpu);
    if (!g) return ft_errorf(err, errlen, "unknown GPU \"%s\" (see `ftest gpus`)", gpu);
    in->gpu = *g;
    if (req_int(o, "gpus", 1, 1024, &in->gpus, err, errlen) < 0) return -1;
    if (req_string(o, "interconnect", ic, sizeof ic, err, errlen) < 0) return -1;
    if (!strcmp(ic, "nvlink")) {
        if (!(g->nvlink_gb_per_s > 0))
            return ft_errorf(err, errlen, "\"interconnect\" is nvlink but %s has no NVLink", g->name);
        in->nvlink = true;
    } else if (strcmp(ic, "pcie") != 0) {
        return ft_errorf(err, errlen, "\"interconnect\" must be nvlink or pcie (got \"%s\")", ic);
    }
    if (req_double(o, "inter_node_gb_per_s", 0, 1e5, &in->inter_node_gb_per_s, err, errlen) < 0) return -1;
    if (req_int(o, "host_ram_bytes", 1, INT64_C(1) << 50, &in->host_ram_bytes, err, errlen) < 0) return -1;
    if (req_int(o, "vcpus", 1, 1 << 16, &in->vcpus, err, errlen) < 0) return -1;
    if (parse_host(o, in, err, errlen) < 0) return -1;
    if (req_double(o, "usd_per_hour", 0, 1e6, &in->usd_per_hour, err, errlen) < 0) return -1;
    if (!(in->usd_per_hour > 0)) return ft_errorf(err, errlen, "\"usd_per_hour\" must be positive");
    char src[512];
    if (req_string(o, "price_source", src, sizeof src, err, errlen) < 0) return -1;
    if (req_string(o, "price_date", in->price_date, sizeof in->price_date, err, errlen) < 0) return -1;
    return 0;
}

int est_instances_parse(const char *text, size_t len, const char *what, const est_gpu_catalog *gpus,
                        est_instance_catalog *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char inner[256];
    cJSON *root = ft_json_parse(text, len, what, err, errlen);
    if (!root) return -1;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "instances");
    int rc = 0;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0) {
        rc = ft_errorf(err, errlen, "%s: needs a non-empty \"instances\" array", what);
        goto done;
    }
    size_t n = (size_t)cJSON_GetArraySize(arr);
    out->items = calloc(n, sizeof *out->items);
    if (!out->items) {
        rc = ft_errorf(err, errlen, "out of memory");
        goto done;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        est_instance *in = &out->items[out->count];
        if (!cJSON_IsObject(it)) {
            rc = ft_errorf(err, errlen, "%s: instance %zu is not an object", what, out->count + 1);
            break;
        }
        if (req_string(it, "name", in->name, sizeof in->name, inner, sizeof inner) < 0) {
            rc = ft_errorf(err, errlen, "%s: instance %zu: %s", what, out->count + 1, inner);
            break;
        }
        if (parse_one(it, gpus, in, inner, sizeof inner) < 0) {
            rc = ft_errorf(err, errlen, "%s: instance \"%s\": %s", what, in->name, inner);
            break;
        }
        for (size_t j = 0; j < out->count; j++)
            if (!strcmp(out->items[j].name, in->name)) {
                rc = ft_errorf(err, errlen, "%s: instance \"%s\" appears twice", what, in->name);
                break;
            }
        if (rc) break;
        out->count++;
    }
done:
    cJSON_Delete(root);
    if (rc < 0) est_instances_free(out);
    return rc;
}

int est_instances_load(const char *path, const est_gpu_catalog *gpus, est_instance_catalog *out,
                       char *err, size_t errlen) {
    char def[PATH_MAX];
    if (!path) path = ft_data_path("models/instances.json", def, sizeof def);
    size_t len = 0;
    char inner[256];
    char *text = ft_read_file(path, CATALOG_MAX_BYTES, &len, inner, sizeof inner);
    if (!text) return ft_errorf(err, errlen, "instance catalog: %s", inner);
    int rc = est_instances_parse(text, len, path, gpus, out, err, errlen);
    free(text);
    return rc;
}

void est_instances_free(est_instance_catalog *cat) {
    free(cat->items);
    cat->items = NULL;
    cat->count = 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

double est_instances_host_ratio_median(const est_instance_catalog *cat) {
    if (!cat->count) return 0;
    double *r = malloc(cat->count * sizeof *r);
    if (!r) return 0;
    size_t n = 0;
    for (size_t i = 0; i < cat->count; i++) {
        const est_instance *in = &cat->items[i];
        double gpu = (double)in->gpus * (double)in->gpu.memory_bytes;
        if (gpu > 0) r[n++] = (double)in->host_ram_bytes / gpu;
    }
    double m = 0;
    if (n) {
        qsort(r, n, sizeof *r, cmp_double);
        m = n % 2 ? r[n / 2] : (r[n / 2 - 1] + r[n / 2]) / 2;
    }
    free(r);
    return m;
}
