#include "record_optim.h"

#include <string.h>

#include "json_util.h"
#include "optimizers.h"

/* The probe's modes that run foreach AdamW: its Trainer modes
 * (calibrate/probes/probe_run.py training_args passes
 * optim=HF_OPTIM[a.optimizer], and HF_OPTIM maps "adamw" to "adamw_torch";
 * under "deepspeed" that optimizer is DeepSpeed's client optimizer), and its
 * FSDP modes, whose own loop builds torch.optim.AdamW(model.parameters(),
 * lr=1e-5) (run_fsdp): foreach and fused left None, so torch 2.11
 * optim/optimizer.py _default_to_fused_or_foreach(use_fused=False) picks
 * foreach for CUDA tensors and for DTensors (torch/distributed/tensor/
 * __init__.py adds DTensor to _foreach_supported_types). */
static bool probe_names_adamw_torch(const cJSON *cfg) {
    static const char *const MODES[] = {"hf", "lora", "qlora", "deepspeed", "fsdp", "fsdp2"};
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(cfg, "probe_mode");
    if (!cJSON_IsString(mode) || !mode->valuestring) return false;
    for (size_t i = 0; i < sizeof MODES / sizeof MODES[0]; i++)
        if (!strcmp(mode->valuestring, MODES[i])) return true;
    return false;
}

static bool settings_foreach(const cJSON *cfg) {
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(cfg, "settings");
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(set, "optimizer_foreach"));
}

int est_record_adamw_impl(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    char v[64];
    int r = ft_json_string(cfg, "adamw_impl", v, sizeof v, err, errlen);
    if (r < 0) return -1;
    if (r == 1) return est_adamw_impl_parse(v, &run->adamw_impl, err, errlen);
    if ((r = ft_json_string(cfg, "optim", v, sizeof v, err, errlen)) < 0) return -1;
    if (r == 1 && !strcmp(v, "adamw_torch_fused")) run->adamw_impl = EST_ADAMW_FUSED;
    else if ((r == 1 && !strcmp(v, "adamw_torch")) || settings_foreach(cfg) || probe_names_adamw_torch(cfg))
        run->adamw_impl = EST_ADAMW_FOREACH;
    if (run->optimizer != EST_OPT_ADAMW) run->adamw_impl = EST_ADAMW_DEFAULT; /* not AdamW: nothing to pick */
    return 0;
}
