/* libFuzzer target: the DeepSpeed config reader (estimator/frameworks/ds_config.c). */
#include <stdint.h>
#include <stdlib.h>

#include "ds_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ft_model m = {.arch = FT_ARCH_LLAMA, .vocab_size = 32000, .hidden_size = 4096,
                  .intermediate_size = 11008, .num_layers = 32, .num_heads = 32,
                  .num_kv_heads = 32, .head_dim = 128, .max_position = 4096};
    est_run run;
    est_run_defaults(&run, &m, NULL);
    char err[256];
    if (est_ds_config_apply((const char *)data, size, &run, err, sizeof err) == 0) {
        if (run.zero_stage < 0 || run.zero_stage > 3 || run.micro_batch < 1 || run.ds.reduce_bucket_elems == 0 ||
            run.ds.reduce_bucket_elems < EST_DS_UNSET || run.ds.persistence_elems < EST_DS_UNSET)
            abort();
    }
    return 0;
}
