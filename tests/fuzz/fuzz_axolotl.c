/* libFuzzer target: the training YAML readers (estimator/frameworks/yaml_json.c,
 * axolotl.c and torchtune.c). Whatever parses is applied to a run, which must then validate
 * or be refused with a message; nothing may crash, hang or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "axolotl.h"
#include "torchtune.h"
#include "torchtune_keys.h"
#include "yaml_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    cJSON *root = est_yaml_parse((const char *)data, size, "fuzz.yml", err, sizeof err);
    if (!root) {
        if (!err[0]) abort(); /* a refusal always says why */
        return 0;
    }
    ft_model m = {.arch = FT_ARCH_LLAMA, .vocab_size = 32000, .hidden_size = 4096,
                  .intermediate_size = 11008, .num_layers = 32, .num_heads = 32,
                  .num_kv_heads = 32, .head_dim = 128, .max_position = 4096};
    est_run run;
    est_run_defaults(&run, &m, NULL);
    est_given given = {.model = true}; /* the model is given: no catalogue lookups */
    char used[340];
    if (est_axolotl_apply(root, "/nonexistent/fuzz.yml", &given, &run, used, sizeof used, err,
                          sizeof err) == 0)
        (void)est_run_validate(&run, err, sizeof err);
    /* the same tree as a torchtune config under each recipe (--seq given) */
    if (est_torchtune_keys_check(root, err, sizeof err) == 0) {
        est_given tt = {.model = true, .seq = true};
        for (int r = 0; r < 4; r++) {
            est_run_defaults(&run, &m, NULL);
            if (est_torchtune_apply(root, (est_tt_recipe)r, &tt, &run, used, sizeof used, err, sizeof err) == 0)
                (void)est_run_validate(&run, err, sizeof err);
        }
    }
    cJSON_Delete(root);
    return 0;
}
