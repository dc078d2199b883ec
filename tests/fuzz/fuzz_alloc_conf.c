/* libFuzzer target: PYTORCH_CUDA_ALLOC_CONF (estimator/ledger/caching_allocator_conf.c)
 * and the caching allocator it configures. The input's first line is the
 * setting; the bytes after it drive mallocs, frees, record_stream frees, syncs
 * and empty_cache on an allocator with a small capacity (or none), and every
 * state must pass est_alloc_check. A refused setting must say why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "caching_allocator.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void replay(est_alloc *a, const uint8_t *p, size_t n) {
    est_alloc_handle live[64];
    int nlive = 0;
    char err[256];
    for (size_t i = 0; i + 1 < n; i += 2) {
        uint8_t op = p[i], arg = p[i + 1];
        int rc = EST_ALLOC_OK;
        if (op % 4 == 0 && nlive < 64) {
            int64_t bytes = (int64_t)(arg | 1) << (op >> 3); /* 1 B .. ~8 GiB */
            rc = est_alloc_malloc(a, bytes, (op >> 2) & 1, &live[nlive]);
            if (rc == EST_ALLOC_OK) nlive++;
            else if (rc == EST_ALLOC_OOM) rc = EST_ALLOC_OK;
        } else if (op % 4 == 1 && nlive > 0) {
            int k = arg % nlive;
            rc = (op & 4) ? est_alloc_release_pending(a, live[k], 2) : est_alloc_release(a, live[k]);
            live[k] = live[--nlive];
        } else if (op % 4 == 2) {
            rc = est_alloc_sync_stream(a, arg % 3);
        } else if (op % 4 == 3) {
            rc = (arg & 1) ? est_alloc_empty_cache(a) : est_alloc_sync(a);
        }
        if (rc != EST_ALLOC_OK || est_alloc_check(a, err, sizeof err) != 0) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nl = memchr(data, '\n', size);
    size_t len = nl ? (size_t)(nl - data) : size;
    char *conf = malloc(len + 1);
    if (!conf) return 0;
    memcpy(conf, data, len);
    conf[len] = '\0';
    est_alloc_config c;
    est_alloc_config_default(&c);
    char err[256] = "";
    int rc = est_alloc_config_parse(conf, &c, err, sizeof err);
    free(conf);
    if (rc != 0) {
        if (!err[0]) abort();
        return 0;
    }
    const uint8_t *ops = nl ? nl + 1 : data + size;
    size_t nops = (size_t)(data + size - ops);
    if (nops > 0) { /* the first op byte picks the capacity: none, or 8 MiB .. 2 GiB */
        c.capacity_bytes = ops[0] % 9 ? (int64_t)8 << (20 + ops[0] % 9) : 0;
        ops++, nops--;
    }
    est_alloc *a = est_alloc_new(&c, err, sizeof err);
    if (!a) {
        if (!err[0]) abort();
        return 0;
    }
    replay(a, ops, nops);
    est_alloc_free(a);
    return 0;
}
