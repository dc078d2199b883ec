/* A record's LoHa, LoKr, OFT, FourierFT and WaveFT settings (record_peft_delta.h). */
#include "record_peft_delta.h"

#include <string.h>

#include "json_util.h"
#include "lora.h"
#include "record_peft_targets.h"
#include "peft_delta.h"

bool est_record_pdelta_method(const char *name, est_peft *out) {
    static const struct {
        const char *name;
        est_peft peft;
    } M[] = {{"loha", EST_PEFT_LOHA}, {"lokr", EST_PEFT_LOKR}, {"oft", EST_PEFT_OFT},
             {"fourierft", EST_PEFT_FOURIERFT},
             {"waveft", EST_PEFT_WAVEFT}};
    for (size_t i = 0; i < sizeof M / sizeof M[0]; i++)
        if (!strcmp(name, M[i].name)) {
            *out = M[i].peft;
            return true;
        }
    return false;
}

/* peft_target_modules "q_proj;v_proj" (the method comparison's spelling). */
static int targets(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    return est_record_peft_targets(cfg, &run->pdelta.targets, err, errlen);
}

/* Settings the block description does not model are refused by name. */
static int refused(const cJSON *keys, char *err, size_t errlen) {
    static const char *const TRUE_KEYS[] = {"decompose_both", "block_share", "coft", "use_effective_conv2d"};
    for (size_t i = 0; i < sizeof TRUE_KEYS / sizeof TRUE_KEYS[0]; i++) {
        bool v = false;
        if (ft_json_bool(keys, TRUE_KEYS[i], &v, err, errlen) < 0) return -1;
        if (v) return ft_errorf(err, errlen, "peft_key_params %s true is not modelled", TRUE_KEYS[i]);
    }
    bool neumann = true;
    if (ft_json_bool(keys, "use_cayley_neumann", &neumann, err, errlen) < 0) return -1;
    if (!neumann) return ft_errorf(err, errlen, "OFT's exact Cayley transform (use_cayley_neumann false) is "
                                                "not modelled");
    char wavelet[16];
    int w = ft_json_string(keys, "wavelet_family", wavelet, sizeof wavelet, err, errlen);
    if (w < 0) return -1;
    if (w == 1 && strcmp(wavelet, "db1"))
        return ft_errorf(err, errlen, "WaveFT's wavelet %s (padded reconstruction) is not modelled", wavelet);
    bool idwt = true, proportional = false;
    if (ft_json_bool(keys, "use_idwt", &idwt, err, errlen) < 0 ||
        ft_json_bool(keys, "proportional_parameters", &proportional, err, errlen) < 0)
        return -1;
    if (!idwt || proportional)
        return ft_errorf(err, errlen, "WaveFT without the inverse transform, or with proportional "
                                      "parameters, is not modelled");
    double p = 0;
    if (ft_json_double(keys, "rank_dropout", 0, 1, &p, err, errlen) < 0 ||
        ft_json_double(keys, "module_dropout", 0, 1, &p, err, errlen) < 0)
        return -1;
    if (p > 0) return ft_errorf(err, errlen, "LyCORIS rank/module dropout is not modelled");
    return 0;
}

int est_record_pdelta(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    if (!est_pdelta_on(run)) return 0;
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(cfg, "peft_key_params");
    if (targets(cfg, run, err, errlen) < 0) return -1;
    if (!cJSON_IsObject(keys)) return 0;
    if (refused(keys, err, errlen) < 0 ||
        ft_json_int64(keys, "r", 1, EST_LORA_MAX_RANK, &run->pdelta.rank, err, errlen) < 0 ||
        ft_json_double(keys, "alpha", -1e9, 1e9, &run->pdelta.alpha, err, errlen) < 0 ||
        ft_json_int64(keys, "decompose_factor", -1, INT32_MAX, &run->pdelta.factor, err, errlen) < 0 ||
        ft_json_int64(keys, "n_frequency", 1, INT64_MAX / 2, &run->pdelta.n_frequency, err, errlen) < 0)
        return -1;
    /* PEFT's defaults where the experiment leaves them out (loha, lokr and
     * fourierft config.py: r 8, n_frequency 1000); OFT's r must be named */
    if (run->pdelta.rank == 0 && (run->peft == EST_PEFT_LOHA || run->peft == EST_PEFT_LOKR)) run->pdelta.rank = 8;
    if (run->pdelta.n_frequency == 0) run->pdelta.n_frequency = run->peft == EST_PEFT_WAVEFT ? 2592 : 1000;
    return 0;
}
