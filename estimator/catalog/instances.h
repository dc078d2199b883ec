/* The instance price catalog (models/instances.json, docs/catalogs.md): what
 * can be rented, with how many GPUs of which type, the links between them, the
 * host, and the on-demand price. `ftest plan --catalog FILE` reads the user's
 * own file in the same format. */
#ifndef EST_INSTANCES_H
#define EST_INSTANCES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu.h"

typedef struct est_instance {
    char name[64];               /* "aws-p5.48xlarge" */
    char provider[32];
    est_gpu gpu;                 /* resolved from gpus.json */
    int64_t gpus;                /* GPUs in one instance (one node) */
    bool nvlink;                 /* the instance's GPUs share an NVLink fabric */
    double inter_node_gb_per_s;  /* network for several instances, 1e9 B/s one way; 0 = single node only */
    int64_t host_ram_bytes;
    int64_t vcpus;
    int64_t host_cores;          /* physical cores; 0 when the entry does not say */
    double host_mem_gb_per_s;    /* DRAM peak bandwidth of the host, 1e9 B/s; 0 when not said */
    double usd_per_hour;         /* on-demand price of the whole instance */
    char price_date[8];          /* YYYY-MM */
} est_instance;

typedef struct est_instance_catalog {
    est_instance *items;
    size_t count;
} est_instance_catalog;

/* Loads `path` (NULL: models/instances.json). Every field is required and
 * checked; a GPU must be in `gpus`. -1 with one line naming the instance and
 * the field. */
int est_instances_load(const char *path, const est_gpu_catalog *gpus, est_instance_catalog *out,
                       char *err, size_t errlen);
/* The same from JSON text; `what` names it in messages. */
int est_instances_parse(const char *text, size_t len, const char *what, const est_gpu_catalog *gpus,
                        est_instance_catalog *out, char *err, size_t errlen);
void est_instances_free(est_instance_catalog *cat);

/* The median over the catalog of host RAM / (GPUs x GPU memory): what a
 * rented node typically carries per byte of GPU memory, the CLI's default
 * host RAM when --host-ram is not given. 0 for an empty catalog. */
double est_instances_host_ratio_median(const est_instance_catalog *cat);

#endif
