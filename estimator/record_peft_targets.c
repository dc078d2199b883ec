#include "record_peft_targets.h"

#include <string.h>

#include "json_util.h"
#include "lora.h"

int est_record_peft_targets(const cJSON *cfg, uint32_t *out, char *err, size_t errlen) {
    char v[160];
    int r = ft_json_string(cfg, "peft_target_modules", v, sizeof v, err, errlen);
    if (r <= 0) return r;
    for (char *p = v; *p; p++)
        if (*p == ';') *p = ',';
    size_t n = strlen(v);
    if (n > 0 && v[n - 1] == ',') v[n - 1] = '\0';
    return est_lora_targets_parse(v, out, err, errlen) < 0 ? -1 : 1;
}
