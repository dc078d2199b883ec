/* libFuzzer target: accelerate's config YAML (estimator/frameworks/accelerate_config.c)
 * through the YAML reader; applied to a run that must then validate or be
 * refused with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accelerate_config.h"
#include "yaml_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    cJSON *root = est_yaml_parse((const char *)data, size, "fuzz.yaml", err, sizeof err);
    if (!root) {
        if (!err[0]) abort();
        return 0;
    }
    ft_model m = {.arch = FT_ARCH_LLAMA, .vocab_size = 32000, .hidden_size = 4096,
                  .intermediate_size = 11008, .num_layers = 32, .num_heads = 32,
                  .num_kv_heads = 32, .head_dim = 128, .max_position = 4096};
    est_run run;
    est_run_defaults(&run, &m, NULL);
    est_given given = {0}; /* no flag given: the file says everything */
    char used[200];
    if (est_accelerate_apply(root, "/nonexistent/fuzz.yaml", &given, &run, used, sizeof used, err,
                             sizeof err) == 0)
        (void)est_run_validate(&run, err, sizeof err);
    cJSON_Delete(root);
    return 0;
}
