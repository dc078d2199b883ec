#include "yaml_json.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "json_util.h"

/* YAML 1.2 core schema for plain scalars: null, booleans, integers, floats. */
static cJSON *plain_scalar(const char *s) {
    if (!*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL"))
        return cJSON_CreateNull();
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) return cJSON_CreateTrue();
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) return cJSON_CreateFalse();
    const char *p = s;
    if (*p == '-' || *p == '+') p++;
    if (*p >= '0' && *p <= '9') {
        errno = 0;
        char *end = NULL;
        double v = strtod(s, &end);
        /* Only a whole decimal number: "1e-4", "0.05", "42" (not "0x10", "1_000"). */
        bool ok = end && !*end && errno != ERANGE && isfinite(v);
        for (const char *c = s; ok && *c; c++)
            if (!strchr("0123456789+-.eE", *c)) ok = false;
        if (ok) return cJSON_CreateNumber(v);
    }
    return cJSON_CreateString(s);
}

typedef struct {
    yaml_parser_t parser;
    char *err;
    size_t errlen;
    const char *name;
} ctx;

static int fail_at(ctx *c, const char *what) {
    return ft_errorf(c->err, c->errlen, "%s line %lu: %s", c->name,
                     (unsigned long)c->parser.mark.line + 1, what);
}

static int next(ctx *c, yaml_event_t *ev) {
    if (!yaml_parser_parse(&c->parser, ev)) {
        const char *problem = c->parser.problem ? c->parser.problem : "malformed YAML";
        return ft_errorf(c->err, c->errlen, "%s line %lu: %s", c->name,
                         (unsigned long)c->parser.problem_mark.line + 1, problem);
    }
    return 0;
}

/* Builds the node that starts with `ev` (already read; consumed here). */
static cJSON *node(ctx *c, yaml_event_t *ev, int depth) {
    if (depth > EST_YAML_MAX_DEPTH) {
        yaml_event_delete(ev);
        fail_at(c, "nested too deeply");
        return NULL;
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT: {
        const char *v = (const char *)ev->data.scalar.value;
        cJSON *out = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? plain_scalar(v)
                                                                      : cJSON_CreateString(v);
        yaml_event_delete(ev);
        return out;
    }
    case YAML_ALIAS_EVENT:
        yaml_event_delete(ev);
        fail_at(c, "aliases (*name) are not supported");
        return NULL;
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        const bool map = ev->type == YAML_MAPPING_START_EVENT;
        const yaml_event_type_t end = map ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT;
        yaml_event_delete(ev);
        cJSON *out = map ? cJSON_CreateObject() : cJSON_CreateArray();
        if (!out) return NULL;
        for (;;) {
            yaml_event_t item;
            if (next(c, &item) < 0) goto bad;
            if (item.type == end) {
                yaml_event_delete(&item);
                return out;
            }
            char key[256] = "";
            if (map) {
                if (item.type != YAML_SCALAR_EVENT) {
                    yaml_event_delete(&item);
                    fail_at(c, "mapping keys must be plain words");
                    goto bad;
                }
                ft_strlcpy(key, (const char *)item.data.scalar.value, sizeof key);
                yaml_event_delete(&item);
                if (next(c, &item) < 0) goto bad;
            }
            cJSON *child = node(c, &item, depth + 1);
            if (!child) goto bad;
            if (map) {
                /* A repeated key: the last one wins, as in PyYAML. */
                cJSON_DeleteItemFromObjectCaseSensitive(out, key);
                cJSON_AddItemToObject(out, key, child);
            } else {
                cJSON_AddItemToArray(out, child);
            }
        }
    bad:
        cJSON_Delete(out);
        return NULL;
    }
    default:
        yaml_event_delete(ev);
        fail_at(c, "unexpected YAML event");
        return NULL;
    }
}

cJSON *est_yaml_load(const char *path, char *err, size_t errlen) {
    size_t len = 0;
    char *text = ft_read_file(path, EST_YAML_MAX_BYTES, &len, err, errlen);
    if (!text) return NULL;
    cJSON *root = est_yaml_parse(text, len, path, err, errlen);
    free(text);
    return root;
}

cJSON *est_yaml_parse(const char *text, size_t len, const char *name, char *err, size_t errlen) {
    if (len > EST_YAML_MAX_BYTES) {
        ft_errorf(err, errlen, "%s: larger than %zu bytes", name, EST_YAML_MAX_BYTES);
        return NULL;
    }
    ctx c = {.err = err, .errlen = errlen, .name = name};
    if (!yaml_parser_initialize(&c.parser)) {
        ft_errorf(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    yaml_parser_set_input_string(&c.parser, (const unsigned char *)text, len);
    cJSON *root = NULL;
    yaml_event_t ev;
    /* stream start, document start, the root node, document end. */
    if (next(&c, &ev) < 0) goto done;
    yaml_event_delete(&ev);
    if (next(&c, &ev) < 0) goto done;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        root = cJSON_CreateObject(); /* an empty file: no settings */
        goto done;
    }
    yaml_event_delete(&ev);
    if (next(&c, &ev) < 0) goto done;
    root = node(&c, &ev, 0);
    if (!root) goto done;
    if (next(&c, &ev) < 0) {
        cJSON_Delete(root);
        root = NULL;
        goto done;
    }
    yaml_event_delete(&ev);
    if (next(&c, &ev) < 0) {
        cJSON_Delete(root);
        root = NULL;
        goto done;
    }
    if (ev.type != YAML_STREAM_END_EVENT) {
        fail_at(&c, "more than one YAML document");
        cJSON_Delete(root);
        root = NULL;
    }
    yaml_event_delete(&ev);
    if (root && !cJSON_IsObject(root)) {
        ft_errorf(err, errlen, "%s: the top level must be a mapping of settings", name);
        cJSON_Delete(root);
        root = NULL;
    }
done:
    yaml_parser_delete(&c.parser);
    return root;
}
