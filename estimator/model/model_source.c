#include "model_source.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "json_util.h"
#include "model_config.h"

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

const char *est_hf_cache_dir(char *buf, size_t n) {
    const char *hub = getenv("HF_HUB_CACHE"), *home = getenv("HF_HOME"), *user = getenv("HOME");
    if (hub && *hub) snprintf(buf, n, "%s", hub);
    else if (home && *home) snprintf(buf, n, "%s/hub", home);
    else snprintf(buf, n, "%s/.cache/huggingface/hub", user && *user ? user : ".");
    return buf;
}

/* The weights in a model folder: the index if there is one, else model.safetensors. */
static int scan_folder(const char *dir, est_model_source *out, char *err, size_t errlen) {
    char p[2200];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    if (is_file(p)) {
        out->have_weights = true;
        return est_st_scan_index(p, &out->weights, err, errlen);
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (is_file(p)) {
        out->have_weights = true;
        return est_st_scan_file(p, &out->weights, err, errlen);
    }
    return 0;
}

static int folder(const char *dir, est_model_source *out, char *err, size_t errlen) {
    snprintf(out->config, sizeof out->config, "%s/config.json", dir);
    if (!is_file(out->config))
        return ft_errorf(err, errlen, "%s has no config.json", dir);
    return scan_folder(dir, out, err, errlen);
}

/* ORG/NAME: one slash, both parts plain names (huggingface_hub's repo id
 * characters: letters, digits, '-', '_', '.'), no "..", not a .json path. */
bool est_model_source_is_repo(const char *s) {
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || !slash[1] || strchr(slash + 1, '/') || s[0] == '.') return false;
    for (const char *c = s; *c; c++)
        if (!(*c == '/' || *c == '-' || *c == '_' || *c == '.' || (*c >= '0' && *c <= '9') ||
              ((*c | 0x20) >= 'a' && (*c | 0x20) <= 'z')))
            return false;
    return !strstr(s, "..") && !ends_with(s, ".json");
}

/* The cache folder of repo ORG/NAME: models--ORG--NAME, else the one folder
 * whose name matches it ignoring case (the Hub resolves repo names without
 * regard to case, and huggingface_hub names the folder as the name was typed).
 * 0, or -1 with err when several folders match (ambiguous) or none does
 * (then dir holds the exact name). */
static int cache_folder(const char *root, const char *repo, char *dir, size_t n, char *err, size_t errlen) {
    const char *slash = strchr(repo, '/');
    char want[600];
    snprintf(want, sizeof want, "models--%.*s--%s", (int)(slash - repo), repo, slash + 1);
    snprintf(dir, n, "%s/%s", root, want);
    if (is_dir(dir)) return 0;
    DIR *d = opendir(root);
    int found = 0;
    char first[600] = "", second[600] = "";
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strcasecmp(e->d_name, want)) ft_strlcpy(found++ ? second : first, e->d_name, sizeof first);
    if (d) closedir(d);
    if (found > 1)
        return ft_errorf(err, errlen, "%s matches %s and %s in the Hugging Face cache (%s), which differ only "
                         "in case; name one exactly", repo, first, second, root);
    if (found == 1) snprintf(dir, n, "%s/%s", root, first);
    return 0;
}

/* refs/main's commit (hex) into commit[n]; "" when absent or not a commit.
 * Read as every input is (ft_read_file): a FIFO or device there is refused,
 * never waited on. 0, or -1 with err. */
static int main_ref(const char *dir, char *commit, size_t n, char *err, size_t errlen) {
    char ref[1500];
    snprintf(ref, sizeof ref, "%s/refs/main", dir);
    commit[0] = '\0';
    struct stat st;
    if (lstat(ref, &st) != 0) return 0;
    size_t len = 0;
    char inner[300];
    char *text = ft_read_file(ref, 4096, &len, inner, sizeof inner);
    if (!text) return ft_errorf(err, errlen, "the Hugging Face cache's %s cannot be read: %s", ref, inner);
    text[strcspn(text, "\r\n")] = '\0';
    ft_strlcpy(commit, text, n);
    free(text);
    for (const char *c = commit; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) commit[0] = '\0';
    return 0;
}

/* huggingface_hub's cache: models--ORG--NAME/refs/main holds the commit whose
 * snapshots/<commit>/ folder links the files. */
static int from_cache(const char *repo, est_model_source *out, char *err, size_t errlen) {
    char root[1024], dir[1400], snap[1600];
    est_hf_cache_dir(root, sizeof root);
    if (cache_folder(root, repo, dir, sizeof dir, err, errlen) < 0) return -1;
    char commit[64] = "";
    if (main_ref(dir, commit, sizeof commit, err, errlen) < 0) return -1;
    if (!commit[0]) {
        /* No refs/main: the one snapshot there is, if exactly one. */
        char snaps[1500];
        snprintf(snaps, sizeof snaps, "%s/snapshots", dir);
        DIR *d = opendir(snaps);
        int count = 0;
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)))
                if (e->d_name[0] != '.' && strlen(e->d_name) < sizeof commit) {
                    ft_strlcpy(commit, e->d_name, sizeof commit);
                    count++;
                }
            closedir(d);
        }
        if (count != 1) commit[0] = '\0';
    }
    snprintf(snap, sizeof snap, "%s/snapshots/%s", dir, commit);
    snprintf(out->config, sizeof out->config, "%s/config.json", snap);
    if (!commit[0] || !is_file(out->config))
        return ft_errorf(err, errlen,
                         "%s is not in the Hugging Face cache (%s); get its config with "
                         "`huggingface-cli download %s config.json`, or pass a config.json path",
                         repo, root, repo);
    snprintf(out->origin, sizeof out->origin, "the Hugging Face cache");
    return scan_folder(snap, out, err, errlen);
}

bool est_shipped_by_repo(const char *repo, char *out, size_t outlen) {
    char names[256][FT_NAME_MAX];
    int n = ft_model_names(names, 256, NULL, 0);
    for (int i = 0; i < n; i++) {
        ft_model m;
        if (ft_model_load(names[i], &m, NULL, 0) == 0 && m.hf_repo[0] && !strcasecmp(m.hf_repo, repo))
            return ft_strlcpy(out, names[i], outlen);
    }
    return false;
}

int est_model_source_resolve(const char *arg, est_model_source *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!arg || !*arg) return ft_errorf(err, errlen, "empty --model");
    if (is_dir(arg)) {
        snprintf(out->origin, sizeof out->origin, "a model folder");
        return folder(arg, out, err, errlen);
    }
    if (ends_with(arg, ".safetensors") || ends_with(arg, ".safetensors.index.json")) {
        char dir[2048];
        const char *slash = strrchr(arg, '/');
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - arg) : 1, slash ? arg : ".");
        snprintf(out->config, sizeof out->config, "%s/config.json", dir);
        if (!is_file(out->config))
            return ft_errorf(err, errlen, "no config.json beside %s (the shapes come from it)", arg);
        out->have_weights = true;
        snprintf(out->origin, sizeof out->origin, "safetensors headers");
        return ends_with(arg, ".json") ? est_st_scan_index(arg, &out->weights, err, errlen)
                                       : est_st_scan_file(arg, &out->weights, err, errlen);
    }
    if (!is_file(arg) && est_model_source_is_repo(arg)) {
        int rc = from_cache(arg, out, err, errlen);
        if (rc < 0 && est_shipped_by_repo(arg, out->config, sizeof out->config)) {
            out->have_weights = false;
            out->origin[0] = '\0';
            return 0;
        }
        return rc;
    }
    if (!ft_strlcpy(out->config, arg, sizeof out->config)) return ft_errorf(err, errlen, "--model is too long");
    return 0;
}
