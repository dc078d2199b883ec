/* axolotl's unfrozen_parameters as freeze.py reads them (axolotl_unfrozen.h). */
#include "axolotl_unfrozen.h"

#include <ctype.h>
#include <string.h>

#include "json_util.h"
#include "trainable.h"

/* LayerNamePattern._parse_pattern: "NAME[START:END]", "NAME[I]" (digits,
 * either side may be empty) at the end: the length of NAME, or of the whole
 * pattern when there is no range. */
static size_t without_range(const char *p) {
    const size_t n = strlen(p);
    if (n < 3 || p[n - 1] != ']') return n;
    const char *open = strrchr(p, '[');
    if (!open || open == p) return n;
    for (const char *c = open + 1; c < p + n - 1; c++)
        if (!isdigit((unsigned char)*c) && *c != ':') return n;
    if (strchr(open + 1, ':') != strrchr(open + 1, ':')) return n; /* one colon at most */
    return (size_t)(open - p);
}

/* re.sub(r"\.(?!\+)", "\\.", name) and re.match's anchoring: ^( ... ). */
static int convert(const char *raw, char *out, size_t n, char *err, size_t errlen) {
    const size_t len = without_range(raw);
    size_t k = 0;
    if (n < 8) return -1;
    out[k++] = '^';
    out[k++] = '(';
    for (size_t i = 0; i < len; i++) {
        if (k + 4 >= n) return ft_errorf(err, errlen, "unfrozen_parameters: pattern \"%s\" is too long", raw);
        if (raw[i] == '.' && raw[i + 1] != '+') out[k++] = '\\';
        out[k++] = raw[i];
    }
    out[k++] = ')';
    out[k] = '\0';
    return 0;
}

static int add(est_trainable *t, const char *raw, char *err, size_t errlen) {
    if (t->n == EST_TRAINABLE_MAX)
        return ft_errorf(err, errlen, "unfrozen_parameters: more than %d patterns", EST_TRAINABLE_MAX);
    if (!raw[0]) return ft_errorf(err, errlen, "unfrozen_parameters: an empty pattern");
    if (convert(raw, t->pattern[t->n], sizeof t->pattern[t->n], err, errlen)) return -1;
    char why[200];
    if (est_trainable_pattern_check(t->pattern[t->n], why, sizeof why))
        return ft_errorf(err, errlen, "unfrozen_parameters: pattern \"%s\" %s", raw, why);
    /* train.py: a pattern naming lm_head or embed_tokens makes the model call
     * enable_input_require_grads() */
    if (strstr(raw, "lm_head") || strstr(raw, "embed_tokens")) t->input_grads = true;
    t->n++;
    return 0;
}

/* validation.py check_use_reentrant_mismatch refuses reentrant checkpointing
 * asked for beside unfrozen_parameters. */
static int reentrant_refused(const cJSON *root, char *err, size_t errlen) {
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "gradient_checkpointing_kwargs");
    const cJSON *ur = cJSON_IsObject(kw) ? cJSON_GetObjectItemCaseSensitive(kw, "use_reentrant") : NULL;
    if (cJSON_IsTrue(ur))
        return ft_errorf(err, errlen, "unfrozen_parameters with gradient_checkpointing_kwargs.use_reentrant: "
                                      "true: axolotl refuses it (use_reentrant must be false with a "
                                      "partially frozen model)");
    return 0;
}

int est_axolotl_unfrozen(const cJSON *root, const est_given *given, est_run *run, bool *set, char *err,
                         size_t errlen) {
    *set = false;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "unfrozen_parameters"), *e;
    if (!it || cJSON_IsNull(it) || given->trainable) return 0;
    est_trainable t;
    memset(&t, 0, sizeof t);
    t.lenient = true; /* freeze.py skips a pattern that matches nothing */
    if (cJSON_IsString(it) && it->valuestring) {
        if (add(&t, it->valuestring, err, errlen)) return -1;
    } else if (cJSON_IsArray(it)) {
        cJSON_ArrayForEach(e, it) {
            if (!cJSON_IsString(e) || !e->valuestring)
                return ft_errorf(err, errlen, "unfrozen_parameters must list name patterns");
            if (add(&t, e->valuestring, err, errlen)) return -1;
        }
    } else {
        return ft_errorf(err, errlen, "unfrozen_parameters must be a list of name patterns");
    }
    if (t.n == 0) return 0; /* [] freezes nothing: `if cfg.unfrozen_parameters` is false */
    if (reentrant_refused(root, err, errlen)) return -1;
    run->trainable = t;
    *set = true;
    return 0;
}
