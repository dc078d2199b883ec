/* libFuzzer target: the DeepSpeed config reader (estimator/frameworks/ds_config.c)
 * and its key table (ds_keys.c), at each DeepSpeed version of ftest's stacks:
 * a first byte below 4 picks the stack and the rest is the config (any other
 * input is a config under the default stack, as the older seeds are). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ds_config.h"
#include "ds_keys.h"
#include "json_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const STACKS[] = {"2024-04", "2025-02", "2026-11", "2026-07"};
    ft_model m = {.arch = FT_ARCH_LLAMA, .vocab_size = 32000, .hidden_size = 4096,
                  .intermediate_size = 11008, .num_layers = 32, .num_heads = 32,
                  .num_kv_heads = 32, .head_dim = 128, .max_position = 4096};
    est_run run;
    est_run_defaults(&run, &m, NULL);
    if (size > 0 && data[0] < 4) {
        const est_stack *s = est_stack_find(STACKS[data[0] % 4]);
        if (s) run.stack = s;
        data++;
        size--;
    }
    char err[256];
    if (est_ds_config_apply((const char *)data, size, &run, err, sizeof err) == 0) {
        if (run.zero_stage < 0 || run.zero_stage > 3 || run.micro_batch < 1 || run.ds.reduce_bucket_elems == 0 ||
            run.ds.reduce_bucket_elems < EST_DS_UNSET || run.ds.persistence_elems < EST_DS_UNSET)
            abort();
        /* the from line: always terminated, never past its buffer, whole keys */
        cJSON *root = ft_json_parse((const char *)data, size, "fuzz", NULL, 0);
        char used[64];
        memset(used, 'x', sizeof used);
        est_ds_keys_modelled(root, used, sizeof used);
        if (!memchr(used, '\0', sizeof used)) abort();
        cJSON_Delete(root);
    } else if (!memchr(err, '\0', sizeof err) || strchr(err, '\n')) {
        abort();
    }
    return 0;
}
