/* What a training YAML (--axolotl) set and what ftest left alone: the keys it
 * applied ("from FILE: ..."), the keys that change nothing it estimates, and
 * the keys outside its tables (estimator/frameworks/axolotl_keys.c), so that
 * no key is dropped without the output saying so. */
#include "report_settings.h"

#include <string.h>

#include <cJSON.h>

#include "axolotl_keys.h"

void est_print_settings_unused(FILE *out, const est_run *r) {
    if (r->settings_ignored[0])
        fprintf(out, "ignored (no effect on the step's memory or time): %s\n", r->settings_ignored);
    if (r->settings_unknown[0])
        fprintf(out, "ignored, not in ftest's table of axolotl %s keys (may change memory or time): %s\n",
                EST_AXOLOTL_VERSION, r->settings_unknown);
}

/* "a, b (note), c" as a JSON array of strings. */
static cJSON *list_json(const char *list) {
    cJSON *a = cJSON_CreateArray();
    const char *p = list;
    while (a && *p) {
        const char *end = strstr(p, ", ");
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char item[160];
        snprintf(item, sizeof item, "%.*s", (int)(n < sizeof item - 1 ? n : sizeof item - 1), p);
        cJSON_AddItemToArray(a, cJSON_CreateString(item));
        p += n;
        if (*p) p += 2;
    }
    return a;
}

void *est_settings_json(const est_run *r) {
    if (!r->settings_from[0]) return NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "from", r->settings_from);
    cJSON_AddStringToObject(o, "schema", "axolotl " EST_AXOLOTL_VERSION);
    cJSON_AddItemToObject(o, "ignored", list_json(r->settings_ignored));
    cJSON_AddItemToObject(o, "unknown", list_json(r->settings_unknown));
    return o;
}
