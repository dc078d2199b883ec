/* libFuzzer target: the config.json parser (common/model_config.c) on
 * arbitrary bytes. Any accepted config must have sane, positive shapes. */
#include <stdint.h>
#include <stdlib.h>

#include "model_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ft_model m;
    char err[256];
    if (ft_model_parse((const char *)data, size, "fuzz", &m, err, sizeof err) == 0) {
        if (m.hidden_size <= 0 || m.num_layers <= 0 || m.vocab_size <= 0 || m.head_dim <= 0 ||
            m.num_kv_heads <= 0 || m.num_heads % m.num_kv_heads != 0)
            abort();
    }
    return 0;
}
