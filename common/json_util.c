#include "json_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_io.h"
#include "suggest.h"

int ft_parse_choice(const char *what, const char *const *names, int n, const char *s, int *out,
                    char *err, size_t errlen) {
    for (int i = 0; i < n; i++)
        if (s && !strcmp(s, names[i])) {
            *out = i;
            return 0;
        }
    char choices[160] = "", hint[160] = "";
    for (int i = 0; i < n; i++) {
        strncat(choices, names[i], sizeof choices - strlen(choices) - 1);
        if (i + 1 < n) strncat(choices, "|", sizeof choices - strlen(choices) - 1);
    }
    if (s && *s) ft_suggest_close(s, names, (size_t)n, hint, sizeof hint); /* fp16 -> fp16-mixed */
    return ft_errorf(err, errlen, "%s must be one of %s (got \"%.40s\")%s%s%s", what, choices, s ? s : "",
                     hint[0] ? "; did you mean " : "", hint, hint[0] ? "?" : "");
}

char *ft_read_file(const char *path, size_t max_bytes, size_t *len_out, char *err, size_t errlen) {
    size_t size = 0;
    int fd = ft_open_input(path, "", max_bytes, &size, err, errlen);
    if (fd < 0) return NULL;
    /* The size is known and capped before anything is allocated; the loop still
     * stops at end of file (a file that shrank) and refuses one that grew. */
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        ft_errorf(err, errlen, "out of memory reading %s", path);
        return NULL;
    }
    size_t len = 0;
    for (;;) {
        ssize_t got = read(fd, buf + len, size + 1 - len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            ft_errorf(err, errlen, "cannot read %s: %s", path, strerror(e));
            return NULL;
        }
        if (got == 0) break;
        len += (size_t)got;
        if (len > size) {
            free(buf);
            close(fd);
            ft_errorf(err, errlen, "%s grew while it was read", path);
            return NULL;
        }
    }
    close(fd);
    buf[len] = '\0';
    if (len_out) *len_out = len;
    return buf;
}

/* The nesting depth of text[0, stop): arrays and objects opened and not yet
 * closed, strings skipped. */
static size_t depth_at(const char *text, size_t stop) {
    size_t depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < stop; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            depth++;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return depth;
}

/* Keys compared for sorting: by name, then by position (stable). */
typedef struct {
    const cJSON *item;
    size_t index;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    int c = strcmp(x->item->string, y->item->string);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* The members of object `obj` sorted by key (then position); NULL with *n 0
 * when it has fewer than two, or when out of memory (*oom set). */
static keyed *sorted_members(const cJSON *obj, size_t *n, bool *oom) {
    *n = 0;
    for (const cJSON *c = obj->child; c; c = c->next) (*n)++;
    if (*n < 2) return NULL;
    keyed *v = malloc(*n * sizeof *v);
    if (!v) {
        *oom = true;
        return NULL;
    }
    size_t i = 0;
    for (const cJSON *c = obj->child; c; c = c->next, i++) v[i] = (keyed){c, i};
    for (i = 0; i < *n; i++)
        if (!v[i].item->string) { /* not an object's member: nothing to compare */
            free(v);
            *n = 0;
            return NULL;
        }
    qsort(v, *n, sizeof *v, cmp_keyed);
    return v;
}

/* Applies `policy` to every object under `node`: FT_JSON_LAST_WINS removes
 * each member that a later one of the same key overrides (Python's json
 * keeps the last); FT_JSON_REFUSE_DUPLICATES names the first duplicate key
 * (dotted path) in `path`. 0, 1 when a duplicate was refused, -1 out of memory. */
static int duplicates(cJSON *node, ft_json_duplicates policy, char *path, size_t pathlen) {
    for (cJSON *c = node ? node->child : NULL; c; c = c->next) {
        int rc = duplicates(c, policy, path, pathlen);
        if (rc) {
            if (rc == 1 && cJSON_IsObject(node) && c->string) { /* prefix the parent's key */
                char inner[256];
                ft_strlcpy(inner, path, sizeof inner);
                snprintf(path, pathlen, "%s.%s", c->string, inner);
            }
            return rc;
        }
    }
    if (!cJSON_IsObject(node)) return 0;
    size_t n;
    bool oom = false;
    keyed *v = sorted_members(node, &n, &oom);
    if (oom) return -1;
    int rc = 0;
    for (size_t i = 0; i + 1 < n && rc == 0; i++) {
        if (strcmp(v[i].item->string, v[i + 1].item->string)) continue;
        if (policy == FT_JSON_REFUSE_DUPLICATES) {
            snprintf(path, pathlen, "%s", v[i].item->string);
            rc = 1;
        } else {
            cJSON_Delete(cJSON_DetachItemViaPointer(node, (cJSON *)v[i].item));
        }
    }
    free(v);
    return rc;
}

cJSON *ft_json_parse_opts(const char *text, size_t len, const char *what, ft_json_duplicates policy,
                          char *err, size_t errlen) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = (end && end >= text) ? (size_t)(end - text) : 0;
        if (off <= len && depth_at(text, off) >= CJSON_NESTING_LIMIT)
            ft_errorf(err, errlen, "%s nests arrays or objects deeper than %d levels (near byte %zu), "
                      "more than ftest reads", what, CJSON_NESTING_LIMIT, off);
        else
            ft_errorf(err, errlen, "%s is not valid JSON (near byte %zu)", what, off);
        return NULL;
    }
    char path[256] = "";
    int rc = duplicates(root, policy, path, sizeof path);
    if (rc) {
        cJSON_Delete(root);
        if (rc < 0) ft_errorf(err, errlen, "out of memory reading %s", what);
        else ft_errorf(err, errlen, "%s has the key \"%s\" twice", what, path);
        return NULL;
    }
    return root;
}

cJSON *ft_json_parse(const char *text, size_t len, const char *what, char *err, size_t errlen) {
    return ft_json_parse_opts(text, len, what, FT_JSON_LAST_WINS, err, errlen);
}

static const cJSON *field(const cJSON *obj, const char *key) {
    if (!cJSON_IsObject(obj)) return NULL;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return (it && !cJSON_IsNull(it)) ? it : NULL;
}

int ft_json_int64(const cJSON *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                  char *err, size_t errlen) {
    const cJSON *it = field(obj, key);
    if (!it) return 0;
    if (!cJSON_IsNumber(it))
        return ft_errorf(err, errlen, "\"%s\" must be a number", key);
    double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v))
        return ft_errorf(err, errlen, "\"%s\" must be an integer (got %g)", key, v);
    /* 2^53: beyond it a double no longer holds every integer exactly; no
     * field ftest reads allows as much. */
    if (fabs(v) > 9007199254740992.0 || v < (double)min || v > (double)max)
        return ft_errorf(err, errlen, "\"%s\" = %.0f is out of range [%lld, %lld]", key, v,
                         (long long)min, (long long)max);
    *out = (int64_t)v;
    return 1;
}

int ft_json_double(const cJSON *obj, const char *key, double min, double max, double *out,
                   char *err, size_t errlen) {
    const cJSON *it = field(obj, key);
    if (!it) return 0;
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
        return ft_errorf(err, errlen, "\"%s\" must be a finite number", key);
    if (it->valuedouble < min || it->valuedouble > max)
        return ft_errorf(err, errlen, "\"%s\" = %g is out of range [%g, %g]", key,
                         it->valuedouble, min, max);
    *out = it->valuedouble;
    return 1;
}

int ft_json_bool(const cJSON *obj, const char *key, bool *out, char *err, size_t errlen) {
    const cJSON *it = field(obj, key);
    if (!it) return 0;
    if (!cJSON_IsBool(it)) return ft_errorf(err, errlen, "\"%s\" must be true or false", key);
    *out = cJSON_IsTrue(it);
    return 1;
}

int ft_json_string(const cJSON *obj, const char *key, char *out, size_t outlen, char *err,
                   size_t errlen) {
    const cJSON *it = field(obj, key);
    if (!it) return 0;
    if (!cJSON_IsString(it) || !it->valuestring)
        return ft_errorf(err, errlen, "\"%s\" must be a string", key);
    if (!ft_strlcpy(out, it->valuestring, outlen))
        return ft_errorf(err, errlen, "\"%s\" is longer than %zu characters", key, outlen - 1);
    return 1;
}

size_t ft_cut_line(char *line, char *end, char **next) {
    char *nl = memchr(line, '\n', (size_t)(end - line));
    size_t len = nl ? (size_t)(nl - line) : (size_t)(end - line);
    *next = nl ? nl + 1 : end;
    line[len] = '\0';
    return len;
}
