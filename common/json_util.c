#include "json_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_io.h"

int ft_parse_choice(const char *what, const char *const *names, int n, const char *s, int *out,
                    char *err, size_t errlen) {
    for (int i = 0; i < n; i++)
        if (s && !strcmp(s, names[i])) {
            *out = i;
            return 0;
        }
    char choices[160] = "";
    for (int i = 0; i < n; i++) {
        strncat(choices, names[i], sizeof choices - strlen(choices) - 1);
        if (i + 1 < n) strncat(choices, "|", sizeof choices - strlen(choices) - 1);
    }
    return ft_errorf(err, errlen, "%s must be one of %s (got \"%.40s\")", what, choices, s ? s : "");
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

cJSON *ft_json_parse(const char *text, size_t len, const char *what, char *err, size_t errlen) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = (end && end >= text) ? (size_t)(end - text) : 0;
        ft_errorf(err, errlen, "%s is not valid JSON (near byte %zu)", what, off);
        return NULL;
    }
    return root;
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
    /* 2^53: beyond it a double no longer holds every integer exactly. */
    if (!isfinite(v) || v != floor(v) || fabs(v) > 9007199254740992.0)
        return ft_errorf(err, errlen, "\"%s\" must be an integer (got %g)", key, v);
    if (v < (double)min || v > (double)max)
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
