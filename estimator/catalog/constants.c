#include "constants.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "json_util.h"
#include "model_config.h" /* ft_data_dir, ft_data_path */

static const char *const NAMES[EST_K_COUNT] = {
#define EST_K_NAME(id, name, def, unit, src) name,
    EST_CONSTANTS(EST_K_NAME)
#undef EST_K_NAME
};
static const char *const UNITS[EST_K_COUNT] = {
#define EST_K_UNIT(id, name, def, unit, src) unit,
    EST_CONSTANTS(EST_K_UNIT)
#undef EST_K_UNIT
};
static const double DEFAULTS[EST_K_COUNT] = {
#define EST_K_DEF(id, name, def, unit, src) def,
    EST_CONSTANTS(EST_K_DEF)
#undef EST_K_DEF
};
static const char *const SOURCES[EST_K_COUNT] = {
#define EST_K_SRC(id, name, def, unit, src) src,
    EST_CONSTANTS(EST_K_SRC)
#undef EST_K_SRC
};

const char *est_constant_name(est_constant_id id) { return id < EST_K_COUNT ? NAMES[id] : "?"; }
const char *est_constant_unit(est_constant_id id) { return id < EST_K_COUNT ? UNITS[id] : "?"; }

void est_constants_defaults(est_constants *k) {
    for (int i = 0; i < EST_K_COUNT; i++) {
        k->value[i] = DEFAULTS[i];
        ft_strlcpy(k->source[i], SOURCES[i], sizeof k->source[i]);
    }
}

/* {"name": {"value": x, "source": "..."}, ...}; unknown names are errors so a
 * typo in a profile cannot silently leave a default in force. */
static int apply_section(const cJSON *sec, est_constants *k, char *err, size_t errlen) {
    if (!cJSON_IsObject(sec)) return ft_errorf(err, errlen, "a constants section must be an object");
    for (const cJSON *it = sec->child; it; it = it->next) {
        int id = -1;
        for (int i = 0; i < EST_K_COUNT; i++)
            if (!strcmp(it->string, NAMES[i])) id = i;
        if (id < 0) return ft_errorf(err, errlen, "unknown constant \"%.60s\"", it->string);
        double v = 0;
        if (ft_json_double(it, "value", 0, 1e18, &v, err, errlen) != 1)
            return ft_errorf(err, errlen, "constant \"%s\" needs a finite, non-negative \"value\"",
                             it->string);
        char src[160] = "";
        if (ft_json_string(it, "source", src, sizeof src, err, errlen) != 1)
            return ft_errorf(err, errlen, "constant \"%s\" needs a \"source\" (at most 159 chars)",
                             it->string);
        k->value[id] = v;
        ft_strlcpy(k->source[id], src, sizeof k->source[id]);
    }
    return 0;
}

int est_constants_apply_json(const char *text, size_t len, const char *gpu_name, est_constants *k,
                             char *err, size_t errlen) {
    cJSON *root = ft_json_parse(text, len, "profile", err, errlen);
    if (!root) return -1;
    int rc = 0;
    const cJSON *consts = cJSON_GetObjectItemCaseSensitive(root, "constants");
    if (consts) rc = apply_section(consts, k, err, errlen);
    const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(root, "gpus");
    if (rc == 0 && gpus && gpu_name) {
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(gpus, gpu_name);
        if (g) rc = apply_section(g, k, err, errlen);
    }
    cJSON_Delete(root);
    return rc;
}

/* A handful of (framework, gpu) pairs are used per process; sweeps and plans ask
 * thousands of times, so keep them. */
typedef struct {
    char fw[32];
    char gpu[EST_GPU_NAME_MAX];
    est_constants k;
} cache_entry;
static cache_entry cache[16];
static int cache_used;
static bool use_profiles = true;

void est_constants_use_profiles(bool on) {
    use_profiles = on;
    cache_used = 0;
}

/* The profile names a framework reads, in order (NULL = none). */
static void profile_names(const char *fw, const char *out[2]) {
    out[0] = EST_COMMON_PROFILE; /* the host's cost per op, read by every framework (ftrain's
                                    launches took PyTorch's default cost per op before too) */
    out[1] = fw;
}

const char *est_data_origin(char *buf, size_t n) {
    const char *env = getenv("FTEST_DATA_DIR");
    if (env && *env) snprintf(buf, n, "FTEST_DATA_DIR=%s", env);
    else if (!strcmp(ft_data_dir(), ".")) snprintf(buf, n, "./models of the working directory");
    else snprintf(buf, n, "shipped");
    return buf;
}

void est_constants_profiles_in_force(const char *fw, char *buf, size_t n) {
    if (!use_profiles) {
        snprintf(buf, n, "none (--no-profile)");
        return;
    }
    const char *names[2];
    profile_names(fw, names);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < 2; i++) {
        if (!names[i]) continue;
        char rel[128], path[PATH_MAX];
        snprintf(rel, sizeof rel, "calibrate/profiles/%s.json", names[i]);
        ft_data_path(rel, path, sizeof path);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        int w = snprintf(buf + used, n - used, "%s%s%s.json", used ? ", " : "",
                         used ? "" : "calibrate/profiles/", names[i]);
        if (w < 0 || (size_t)w >= n - used) break;
        used += (size_t)w; /* the first with its folder (under the data folder), then bare names */
    }
    if (!used) snprintf(buf, n, "none (built-in defaults)");
}

int est_constants_for(const char *fw, const char *gpu_name, est_constants *k, char *err,
                      size_t errlen) {
    const char *g = gpu_name ? gpu_name : "";
    for (int i = 0; i < cache_used; i++)
        if (!strcmp(cache[i].fw, fw) && !strcmp(cache[i].gpu, g)) {
            *k = cache[i].k;
            return 0;
        }
    est_constants_defaults(k);
    /* PyTorch's own constants (the caching allocator) first, then the framework's. */
    const char *profiles[2];
    profile_names(fw, profiles);
    for (int i = 0; i < 2 && use_profiles; i++) {
        if (!profiles[i]) continue;
        char rel[128], path[PATH_MAX], inner[256];
        snprintf(rel, sizeof rel, "calibrate/profiles/%s.json", profiles[i]);
        ft_data_path(rel, path, sizeof path);
        size_t len = 0;
        struct stat st;
        if (stat(path, &st) != 0 && errno == ENOENT) continue; /* no profile: the defaults */
        /* A profile that is there but cannot be read is an error, never a silent
         * fall-back to the defaults (--no-profile asks for those). */
        char *text = ft_read_file(path, (size_t)1 << 20, &len, inner, sizeof inner);
        if (!text) return ft_errorf(err, errlen, "profile %s (use --no-profile for the built-in defaults)", inner);
        int rc = est_constants_apply_json(text, len, g, k, inner, sizeof inner);
        free(text);
        if (rc < 0) return ft_errorf(err, errlen, "%s: %s", path, inner);
    }
    if (cache_used < (int)(sizeof cache / sizeof cache[0])) {
        ft_strlcpy(cache[cache_used].fw, fw, sizeof cache[cache_used].fw);
        ft_strlcpy(cache[cache_used].gpu, g, sizeof cache[cache_used].gpu);
        cache[cache_used].k = *k;
        cache_used++;
    }
    return 0;
}
