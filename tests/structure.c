/* The source tree's shape (issue 12): no include cycles between modules, no
 * function longer than 80 lines in estimator/ and trainer/ (and common/,
 * where the folder layout puts the code both share).
 *
 * Both rules are read from the files themselves by two plain checkers that
 * take a root folder and return what they find, so the same code runs on the
 * fixture trees of tests/fixtures/structure/ (where the answer is known by
 * construction: one cycle a -> b -> a, one 81-line function) and on the real
 * tree (FTEST_SOURCE_ROOT, which the Makefile defines).
 *
 * A module is a file stem: foo.c and foo.h (and foo.cu) are module foo.
 * Module A depends on B when one of A's files has `#include "B.h"` (quote
 * includes only; a path in the include is reduced to its basename, as the
 * build resolves headers through one -I per folder). Folders are searched
 * recursively, so the layout may grow subfolders.
 *
 * A function is counted from the line where its definition starts (column 0,
 * clang-format puts it there) to the line of its closing brace, inclusive. A
 * brace-enclosed block at file scope whose opening text has an '=' before the
 * brace (`static const x[] = {`) is an initializer - a table - and is not a
 * function; neither is one without '(' (struct, enum, extern "C"). */
#include <check.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef FTEST_SOURCE_ROOT
#define FTEST_SOURCE_ROOT "."
#endif

#define STRUCT_MAX_FUNCTION_LINES 80

/* ---------------------------------------------------------------- findings */

/* One finding: key is stable across folder moves (module names for a cycle,
 * "file.c:function" for a long function) and is what allow-lists name;
 * detail is the human-readable rest. */
typedef struct {
    char key[256];
    char detail[512];
} st_finding;

typedef struct {
    st_finding *v;
    int n, cap;
} st_findings;

static void findings_add(st_findings *f, const char *key, const char *detail) {
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 16;
        f->v = realloc(f->v, (size_t)f->cap * sizeof *f->v);
        ck_assert_ptr_nonnull(f->v);
    }
    snprintf(f->v[f->n].key, sizeof f->v[f->n].key, "%s", key);
    snprintf(f->v[f->n].detail, sizeof f->v[f->n].detail, "%s", detail);
    f->n++;
}

static bool findings_has(const st_findings *f, const char *key) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->v[i].key, key)) return true;
    return false;
}

/* The findings one per line ("  key: detail") into out, for a test's message;
 * Check's messages stop near 4 KiB, so out keeps the first lines. */
static void findings_lines(const st_findings *f, char *out, size_t n) {
    out[0] = '\0';
    for (int i = 0; i < f->n; i++) {
        char one[1700];
        snprintf(one, sizeof one, "\n  %s: %s", f->v[i].key, f->v[i].detail);
        strncat(out, one, n - strlen(out) - 1);
    }
}

/* ------------------------------------------------------------- source files */

typedef struct {
    char path[1024]; /* relative to the root, e.g. "estimator/run.c" */
    char stem[128];  /* "run" */
    char ext[8];     /* "c", "h", "cu" */
} st_file;

typedef struct {
    st_file *v;
    int n, cap;
} st_files;

static bool has_ext(const char *name, const char *ext) {
    size_t n = strlen(name), e = strlen(ext);
    return n > e + 1 && name[n - e - 1] == '.' && !strcmp(name + n - e, ext);
}

/* Every .c, .h and .cu under root/rel, recursively, in a stable order. */
static void collect(const char *root, const char *rel, st_files *out) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", root, rel);
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, alphasort);
    if (n < 0) return; /* a top folder that does not exist (common/ before the move) */
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        char sub[1024], full[2300];
        if (name[0] == '.') goto next;
        snprintf(sub, sizeof sub, "%s/%s", rel, name);
        snprintf(full, sizeof full, "%s/%s", root, sub);
        struct stat st;
        if (stat(full, &st) != 0) goto next;
        if (S_ISDIR(st.st_mode)) {
            collect(root, sub, out);
        } else if (S_ISREG(st.st_mode) && (has_ext(name, "c") || has_ext(name, "h") || has_ext(name, "cu"))) {
            if (out->n == out->cap) {
                out->cap = out->cap ? 2 * out->cap : 64;
                out->v = realloc(out->v, (size_t)out->cap * sizeof *out->v);
                ck_assert_ptr_nonnull(out->v);
            }
            st_file *f = &out->v[out->n++];
            snprintf(f->path, sizeof f->path, "%s", sub);
            const char *dot = strrchr(name, '.');
            snprintf(f->stem, sizeof f->stem, "%.*s", (int)(dot - name), name);
            snprintf(f->ext, sizeof f->ext, "%s", dot + 1);
        }
    next:
        free(ents[i]);
    }
    free(ents);
}

static char *slurp_rel(const char *root, const char *rel) {
    char full[2300];
    snprintf(full, sizeof full, "%s/%s", root, rel);
    FILE *fp = fopen(full, "rb");
    ck_assert_msg(fp != NULL, "cannot open %s", full);
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(buf);
    size_t got = fread(buf, 1, (size_t)len, fp);
    fclose(fp);
    buf[got] = '\0';
    return buf;
}

/* ------------------------------------------------------ include cycles */

typedef struct {
    char (*name)[128];
    int n;
    bool *dep; /* n x n: dep[a * n + b] = module a includes b.h */
} st_graph;

static int module_index(const st_graph *g, const char *stem) {
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->name[i], stem)) return i;
    return -1;
}

/* The stem of the quoted header a `#include "..."` line names, or false. */
static bool quoted_include(const char *line, char *stem, size_t n) {
    while (*line == ' ' || *line == '\t') line++;
    if (*line++ != '#') return false;
    while (*line == ' ' || *line == '\t') line++;
    if (strncmp(line, "include", 7)) return false;
    line += 7;
    while (*line == ' ' || *line == '\t') line++;
    if (*line++ != '"') return false;
    const char *end = strchr(line, '"');
    if (!end) return false;
    const char *base = line;
    for (const char *p = line; p < end; p++)
        if (*p == '/') base = p + 1;
    if (end - base < 3 || strncmp(end - 2, ".h", 2)) return false;
    snprintf(stem, n, "%.*s", (int)(end - 2 - base), base);
    return true;
}

static void graph_build(const char *root, const st_files *files, st_graph *g) {
    g->name = calloc((size_t)files->n + 1, sizeof *g->name);
    ck_assert_ptr_nonnull(g->name);
    g->n = 0;
    for (int i = 0; i < files->n; i++)
        if (module_index(g, files->v[i].stem) < 0) snprintf(g->name[g->n++], 128, "%s", files->v[i].stem);
    g->dep = calloc((size_t)g->n * (size_t)g->n + 1, sizeof *g->dep);
    ck_assert_ptr_nonnull(g->dep);
    for (int i = 0; i < files->n; i++) {
        int a = module_index(g, files->v[i].stem);
        char *text = slurp_rel(root, files->v[i].path);
        for (char *line = text; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = '\0';
            char stem[128];
            if (quoted_include(line, stem, sizeof stem)) {
                int b = module_index(g, stem);
                /* A header no module of the tree owns (check.h of a library) is no edge. */
                if (b >= 0 && b != a) g->dep[a * g->n + b] = true;
            }
            line = nl ? nl + 1 : NULL;
        }
        free(text);
    }
}

/* Tarjan's strongly connected components; each component of two or more
 * modules holds at least one cycle. comp[v] gets v's component number. */
typedef struct {
    const st_graph *g;
    int *index, *low, *stack, *comp;
    bool *on;
    int next, sp, ncomp;
} st_tarjan;

static void tarjan_visit(st_tarjan *t, int v) {
    int n = t->g->n;
    t->index[v] = t->low[v] = t->next++;
    t->stack[t->sp++] = v;
    t->on[v] = true;
    for (int w = 0; w < n; w++) {
        if (!t->g->dep[v * n + w]) continue;
        if (t->index[w] < 0) {
            tarjan_visit(t, w);
            if (t->low[w] < t->low[v]) t->low[v] = t->low[w];
        } else if (t->on[w] && t->index[w] < t->low[v]) {
            t->low[v] = t->index[w];
        }
    }
    if (t->low[v] == t->index[v]) {
        int w;
        do {
            w = t->stack[--t->sp];
            t->on[w] = false;
            t->comp[w] = t->ncomp;
        } while (w != v);
        t->ncomp++;
    }
}

/* One concrete cycle through `start` inside its component (breadth-first, so
 * the shortest), written as "a -> b -> a". */
static void cycle_path(const st_graph *g, const int *comp, int start, char *out, size_t outlen) {
    int n = g->n, *prev = malloc((size_t)n * sizeof *prev), *queue = malloc((size_t)n * sizeof *queue);
    ck_assert(prev && queue);
    for (int i = 0; i < n; i++) prev[i] = -2;
    int head = 0, tail = 0, last = -1;
    queue[tail++] = start;
    prev[start] = -1;
    while (head < tail && last < 0) {
        int v = queue[head++];
        for (int w = 0; w < n; w++) {
            if (!g->dep[v * n + w] || comp[w] != comp[start]) continue;
            if (w == start) { last = v; break; }
            if (prev[w] == -2) { prev[w] = v; queue[tail++] = w; }
        }
    }
    int path[256], len = 0;
    for (int v = last; v >= 0 && len < 255; v = prev[v]) path[len++] = v;
    size_t used = 0;
    for (int i = len - 1; i >= 0; i--)
        used += (size_t)snprintf(out + used, used < outlen ? outlen - used : 0, "%s -> ", g->name[path[i]]);
    if (used < outlen) snprintf(out + used, outlen - used, "%s", g->name[start]);
    free(prev);
    free(queue);
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Include cycles among the modules under root/{common,estimator,trainer,calibrate,cli}.
 * One finding per strongly connected component: key = its modules in
 * alphabetical order, space-separated ("estimate timing"); detail = one
 * concrete cycle through the first of them. */
static st_findings structure_include_cycles(const char *root) {
    static const char *const tops[] = {"common", "estimator", "trainer", "calibrate", "cli"};
    st_files files = {0};
    for (size_t i = 0; i < sizeof tops / sizeof tops[0]; i++) collect(root, tops[i], &files);
    st_graph g;
    graph_build(root, &files, &g);
    int n = g.n;
    st_tarjan t = {.g = &g};
    t.index = malloc((size_t)(n + 1) * sizeof(int));
    t.low = malloc((size_t)(n + 1) * sizeof(int));
    t.stack = malloc((size_t)(n + 1) * sizeof(int));
    t.comp = malloc((size_t)(n + 1) * sizeof(int));
    t.on = calloc((size_t)n + 1, sizeof(bool));
    ck_assert(t.index && t.low && t.stack && t.comp && t.on);
    for (int v = 0; v < n; v++) t.index[v] = -1;
    for (int v = 0; v < n; v++)
        if (t.index[v] < 0) tarjan_visit(&t, v);

    st_findings out = {0};
    const char **members = malloc((size_t)(n + 1) * sizeof *members);
    ck_assert_ptr_nonnull(members);
    for (int c = 0; c < t.ncomp; c++) {
        int m = 0;
        for (int v = 0; v < n; v++)
            if (t.comp[v] == c) members[m++] = g.name[v];
        if (m < 2) continue;
        qsort(members, (size_t)m, sizeof *members, cmp_name);
        char key[256] = "", detail[512];
        for (int i = 0; i < m; i++) {
            if (i) strncat(key, " ", sizeof key - strlen(key) - 1);
            strncat(key, members[i], sizeof key - strlen(key) - 1);
        }
        cycle_path(&g, t.comp, module_index(&g, members[0]), detail, sizeof detail);
        findings_add(&out, key, detail);
    }
    free(members);
    free(t.index), free(t.low), free(t.stack), free(t.comp), free(t.on);
    free(g.name), free(g.dep), free(files.v);
    return out;
}

/* ------------------------------------------------------ long functions */

/* Replaces comments, string and character literals by spaces (newlines kept),
 * and blanks preprocessor lines with their continuations, so only code
 * braces remain. */
static void strip_noncode(char *s) {
    enum { CODE, LINE_COMMENT, BLOCK_COMMENT, STRING, CHAR } st = CODE;
    bool line_start = true, in_pp = false;
    for (char *p = s; *p; p++) {
        char c = *p;
        if (c == '\n') {
            if (st == LINE_COMMENT) st = CODE;
            if (in_pp && !(p > s && p[-1] == '\\')) in_pp = false;
            line_start = true;
            continue;
        }
        if (in_pp) {
            *p = ' ';
            continue;
        }
        switch (st) {
        case CODE:
            if (line_start && c == '#') {
                in_pp = true;
                *p = ' ';
                break;
            }
            if (c == '/' && p[1] == '/') st = LINE_COMMENT, *p = ' ';
            else if (c == '/' && p[1] == '*') st = BLOCK_COMMENT, *p = ' ', *++p = ' ';
            else if (c == '"') st = STRING, *p = ' ';
            else if (c == '\'') st = CHAR, *p = ' ';
            break;
        case LINE_COMMENT: *p = ' '; break;
        case BLOCK_COMMENT:
            if (c == '*' && p[1] == '/') *p = ' ', *++p = ' ', st = CODE;
            else *p = ' ';
            break;
        case STRING:
        case CHAR:
            if (c == '\\' && p[1] && p[1] != '\n') *p = ' ', *++p = ' ';
            else {
                if ((st == STRING && c == '"') || (st == CHAR && c == '\'')) st = CODE;
                *p = ' ';
            }
            break;
        }
        if (c != ' ' && c != '\t') line_start = false;
    }
}

/* The identifier just before the first '(' of text, or "?". */
static void function_name(const char *text, char *out, size_t n) {
    const char *paren = strchr(text, '(');
    const char *e = paren;
    while (e > text && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n')) e--;
    const char *b = e;
    while (b > text && (b[-1] == '_' || (b[-1] >= 'a' && b[-1] <= 'z') || (b[-1] >= 'A' && b[-1] <= 'Z') ||
                        (b[-1] >= '0' && b[-1] <= '9')))
        b--;
    if (b == e) snprintf(out, n, "?");
    else snprintf(out, n, "%.*s", (int)(e - b), b);
}

/* Whether the declaration text [decl, brace) is `extern "C"` (its string
 * already blanked) or `namespace [name]`: a scope, not a definition. */
static bool opens_scope(const char *decl, const char *brace) {
    const char *w = decl;
    size_t n = (size_t)(brace - decl);
    if (memchr(decl, '(', n) || memchr(decl, '=', n)) return false;
    if (n >= 6 && !strncmp(w, "extern", 6)) return true;
    return n >= 9 && !strncmp(w, "namespace", 9);
}

/* Functions longer than STRUCT_MAX_FUNCTION_LINES in one file (path relative
 * to root); key "basename:function". */
static void long_functions_in(const char *root, const char *rel, st_findings *out) {
    char *text = slurp_rel(root, rel);
    strip_noncode(text);
    const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
    int depth = 0, transparent = 0, line = 1, decl_line = 0, open_line = 0;
    const char *decl = NULL; /* start of the current file-scope declaration */
    bool is_function = false;
    char name[128] = "";
    for (const char *p = text; *p; p++) {
        char c = *p;
        if (depth == 0 && !decl && c != ' ' && c != '\t' && c != '\n' && c != ';' && c != '}' &&
            (p == text || p[-1] == '\n')) {
            decl = p; /* a declaration starts at column 0 */
            decl_line = line;
        }
        if (c == '\n') line++;
        else if (c == ';' && depth == 0) decl = NULL;
        else if (c == '{' && depth == 0 && decl && opens_scope(decl, p)) {
            transparent++; /* extern "C" { or namespace { : its functions are at file scope */
            decl = NULL;
        } else if (c == '}' && depth == 0 && transparent > 0) {
            transparent--;
            decl = NULL;
        } else if (c == '{') {
            if (depth++ == 0) {
                open_line = line;
                is_function = false;
                if (decl) {
                    size_t len = (size_t)(p - decl);
                    const char *paren = memchr(decl, '(', len), *eq = memchr(decl, '=', len);
                    is_function = paren && !eq;
                    if (is_function) function_name(decl, name, sizeof name);
                }
            }
        } else if (c == '}' && depth > 0 && --depth == 0) {
            int start = decl ? decl_line : open_line;
            int lines = line - start + 1;
            if (is_function && lines > STRUCT_MAX_FUNCTION_LINES) {
                char key[256], detail[512];
                snprintf(key, sizeof key, "%s:%s", base, name);
                snprintf(detail, sizeof detail, "%s:%d: %s is %d lines (limit %d)", rel, start, name, lines,
                         STRUCT_MAX_FUNCTION_LINES);
                findings_add(out, key, detail);
            }
            decl = NULL;
        }
    }
    free(text);
}

/* Functions over the limit in root/estimator, root/cli (ftest's front door,
 * which lived in estimator/cli/) and root/trainer, and in root/common, which
 * holds what estimator/ shared with trainer/ before the folder layout
 * (recursively; .c files, and .cu files, which only trainer's CUDA backend
 * has). */
static st_findings structure_long_functions(const char *root) {
    static const char *const tops[] = {"common", "estimator", "cli", "trainer"};
    st_files files = {0};
    for (size_t i = 0; i < sizeof tops / sizeof tops[0]; i++) collect(root, tops[i], &files);
    st_findings out = {0};
    for (int i = 0; i < files.n; i++)
        if (!strcmp(files.v[i].ext, "c") || !strcmp(files.v[i].ext, "cu"))
            long_functions_in(root, files.v[i].path, &out);
    free(files.v);
    return out;
}

/* ------------------------------------------------- the framework enum's reach */

/* Issue 18: a framework is a seam and an entry of the registry
 * (estimator/fw_registry.h); the code that models a step, the
 * ledgers that read it and the reports that print it ask the registry by
 * capability and never name the framework enum; so do the searches and the
 * estimate's own files; calibrate/, which asks it which runs carry the
 * pending-free term (est_fw_stream_ordered_frees); and the command line,
 * which asks it the framework a flag implies (est_fw_trainer) and whether a
 * framework takes a flag (est_fw_models). Folders and files that must not contain "EST_FW_"
 * (the enum's constants), relative to the root. (run_desc.h defines the enum.) */
static const char *const STRUCTURE_FRAMEWORK_FREE[] = {
    "estimator/model",      "estimator/ledger",         "estimator/report",
    "estimator/search",     "estimator/estimate.c",     "estimator/record.c",
    "estimator/run.c",      "estimator/check_records.c", "estimator/output", "cli", "calibrate", NULL,
};

/* Adds one finding per line of root/rel naming EST_FW_. */
static void framework_mentions_in(const char *root, const char *rel, st_findings *out) {
    char *text = slurp_rel(root, rel);
    int line = 1;
    for (char *p = text; *p; line++) {
        char *eol = strchr(p, '\n');
        if (eol) *eol = '\0';
        if (strstr(p, "EST_FW_")) {
            char key[1100];
            snprintf(key, sizeof key, "%s:%d", rel, line);
            findings_add(out, key, p);
        }
        if (!eol) break;
        p = eol + 1;
    }
    free(text);
}

/* One finding per line naming EST_FW_ in those files and the files under
 * those folders: key "path:line", detail the line. */
static st_findings structure_framework_mentions(const char *root) {
    st_findings out = {0};
    for (const char *const *rel = STRUCTURE_FRAMEWORK_FREE; *rel; rel++) {
        char full[1200];
        struct stat st;
        snprintf(full, sizeof full, "%s/%s", root, *rel);
        if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
            framework_mentions_in(root, *rel, &out);
            continue;
        }
        st_files files = {0};
        collect(root, *rel, &files);
        for (int i = 0; i < files.n; i++) framework_mentions_in(root, files.v[i].path, &out);
        free(files.v);
    }
    return out;
}

/* ------------------------------------------------------ the front door's floor */

/* Issue 18: ftest's front door (cli/: the command line, its commands, main)
 * sits above estimator/ and calibrate/, which take plain structs (est_run,
 * est_given) and never the parsed command line; calibrate/ sits above
 * estimator/ too. So nothing under estimator/ includes a header of cli/ or
 * calibrate/. A header is named by its stem, as in the include graph above;
 * a stem estimator/ has a header of itself is estimator's own. */
static const char *const STRUCTURE_ABOVE_ESTIMATOR[] = {"cli", "calibrate", NULL};

static bool stem_in(const st_files *files, const char *stem, const char *ext) {
    for (int i = 0; i < files->n; i++)
        if (!strcmp(files->v[i].stem, stem) && !strcmp(files->v[i].ext, ext)) return true;
    return false;
}

/* Adds one finding per line of root/rel that includes a header of `above`
 * that `own` does not hold: key "path:line", detail the line. */
static void upward_includes_in(const char *root, const char *rel, const st_files *above,
                               const st_files *own, st_findings *out) {
    char *text = slurp_rel(root, rel);
    int line = 1;
    for (char *p = text; *p; line++) {
        char *eol = strchr(p, '\n');
        if (eol) *eol = '\0';
        char stem[128];
        if (quoted_include(p, stem, sizeof stem) && stem_in(above, stem, "h") && !stem_in(own, stem, "h")) {
            char key[1100];
            snprintf(key, sizeof key, "%s:%d", rel, line);
            findings_add(out, key, p);
        }
        if (!eol) break;
        p = eol + 1;
    }
    free(text);
}

/* One finding per include, under root/estimator, of a header of root/cli or
 * root/calibrate, and under root/calibrate, of a header of root/cli (a stem
 * estimator/ or calibrate/ holds itself is theirs). */
static st_findings structure_upward_includes(const char *root) {
    st_files above = {0}, own = {0}, door = {0}, cal = {0};
    for (const char *const *top = STRUCTURE_ABOVE_ESTIMATOR; *top; top++) collect(root, *top, &above);
    collect(root, "estimator", &own);
    collect(root, "cli", &door);
    collect(root, "calibrate", &cal);
    st_findings out = {0};
    for (int i = 0; i < own.n; i++) upward_includes_in(root, own.v[i].path, &above, &own, &out);
    st_files below_door = {0};
    collect(root, "estimator", &below_door);
    collect(root, "calibrate", &below_door);
    for (int i = 0; i < cal.n; i++) upward_includes_in(root, cal.v[i].path, &door, &below_door, &out);
    free(above.v);
    free(own.v);
    free(door.v);
    free(cal.v);
    free(below_door.v);
    return out;
}

/* ------------------------------------------------------ one run vocabulary */

/* Issue 18: the run vocabulary (precision, offload, checkpointing, attention,
 * loss, optimizer) is defined once, in common/run_vocab.h (FT_PREC_ ...).
 * Under the folders below, a finding is: any TR_ constant of it (the trainer
 * had its own enums, with other numbers: TR_ATTN_FLASH was 1, the
 * estimator's 2); an enum body that lists a constant of it under any prefix;
 * a #define of an EST_ name of it to anything but an FT_ name (run_desc.h
 * spells the shared constants for the estimator: aliases, not numbers). */
static const char *const STRUCTURE_VOCAB_USERS[] = {"estimator", "trainer", "cli", "calibrate", NULL};
static const char *const STRUCTURE_VOCAB_KINDS[] = {"PREC_", "OFFLOAD_", "CKPT_", "ATTN_",
                                                    "LOSS_", "OPT_", NULL};

/* The first token in line that starts with prefix and one of the kinds
 * (at a word start), or NULL. */
static const char *vocab_token(const char *line, const char *prefix) {
    size_t n = strlen(prefix);
    for (const char *p = strstr(line, prefix); p; p = strstr(p + 1, prefix)) {
        if (p > line && (p[-1] == '_' || (p[-1] >= 'A' && p[-1] <= 'Z') ||
                         (p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= '0' && p[-1] <= '9')))
            continue;
        for (const char *const *k = STRUCTURE_VOCAB_KINDS; *k; k++)
            if (!strncmp(p + n, *k, strlen(*k))) return p;
    }
    return NULL;
}

/* True when a line of an enum body, or a #define line, defines a constant of the vocabulary. */
static bool vocab_defines(const char *p, bool in_enum) {
    if (in_enum) return vocab_token(p, "TR_") || vocab_token(p, "EST_") || vocab_token(p, "FT_");
    const char *d = strstr(p, "#define ");
    if (!d) return false;
    const char *name = d + 8;
    while (*name == ' ') name++;
    if (vocab_token(name, "EST_") != name) return false;
    const char *value = strchr(name, ' ');
    while (value && *value == ' ') value++;
    return !value || strncmp(value, "FT_", 3) != 0;
}

/* Adds one finding per line of root/rel that names a TR_ constant of the
 * vocabulary or defines one of its constants: key "path:line". */
static void vocab_definitions_in(const char *root, const char *rel, st_findings *out) {
    char *text = slurp_rel(root, rel);
    int line = 1;
    bool in_enum = false;
    for (char *p = text; *p; line++) {
        char *eol = strchr(p, '\n');
        if (eol) *eol = '\0';
        if (strstr(p, "enum") && strchr(p, '{')) in_enum = true;
        if (vocab_token(p, "TR_") || vocab_defines(p, in_enum)) {
            char key[1100];
            snprintf(key, sizeof key, "%s:%d", rel, line);
            findings_add(out, key, p);
        }
        if (in_enum && strchr(p, '}')) in_enum = false;
        if (!eol) break;
        p = eol + 1;
    }
    free(text);
}

static st_findings structure_vocab_definitions(const char *root) {
    st_findings out = {0};
    for (const char *const *top = STRUCTURE_VOCAB_USERS; *top; top++) {
        st_files files = {0};
        collect(root, *top, &files);
        for (int i = 0; i < files.n; i++) vocab_definitions_in(root, files.v[i].path, &out);
        free(files.v);
    }
    return out;
}

/* ------------------------------------------------------------- allow-lists */

/* Exemptions that stay: a function longer than the limit with the reason it
 * is better whole. Key "file.c:function". Empty: every long function so far
 * can be split. */
typedef struct {
    const char *key;
    const char *reason;
} st_exemption;
static const st_exemption STRUCTURE_EXEMPT_FUNCTIONS[] = {
    {NULL, NULL},
};

static bool exempt(const char *key) {
    for (const st_exemption *e = STRUCTURE_EXEMPT_FUNCTIONS; e->key; e++)
        if (!strcmp(e->key, key)) return true;
    return false;
}

/* ------------------------------------------------------------- the tests */

static const char *fixture(const char *name) {
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/tests/fixtures/structure/%s", FTEST_SOURCE_ROOT, name);
    return buf;
}

static void free_findings(st_findings *f) {
    free(f->v);
    f->v = NULL;
    f->n = f->cap = 0;
}

/* Fixture "cycle": a.c includes b.h (under trainer/sub/, so the search is
 * recursive and across folders), b.h includes a.h; c (estimator/sub/) is
 * included by a and b and includes nothing of theirs back; d.c includes a.h
 * through a path, <b.h> (an angle include: no edge), and c.c names d.h in a
 * comment (no edge). The only cycle is a <-> b. */
START_TEST(cycle_fixture_has_exactly_a_b) {
    st_findings f = structure_include_cycles(fixture("cycle"));
    ck_assert_msg(f.n == 1, "want 1 cycle in the fixture, found %d%s%s", f.n, f.n ? ": " : "",
                  f.n ? f.v[0].detail : "");
    ck_assert_str_eq(f.v[0].key, "a b");
    ck_assert_str_eq(f.v[0].detail, "a -> b -> a");
    free_findings(&f);
}
END_TEST

/* Fixture "long": long.c (estimator/sub/) has one 81-line function
 * (too_long), one of exactly 80 lines, a 100-line table and a 90-line struct;
 * k.cu (in the fixture's trainer, under cuda) has one 85-line kernel;
 * common/shared.c one of 90 lines. */
START_TEST(long_fixture_has_exactly_the_long_ones) {
    st_findings f = structure_long_functions(fixture("long"));
    char all[2048] = "";
    for (int i = 0; i < f.n; i++) {
        strncat(all, f.v[i].detail, sizeof all - strlen(all) - 1);
        strncat(all, "; ", sizeof all - strlen(all) - 1);
    }
    ck_assert_msg(f.n == 3, "want 3 long functions in the fixture, found %d: %s", f.n, all);
    ck_assert_msg(findings_has(&f, "shared.c:long_shared"), "long_shared (90 lines) missed: %s", all);
    ck_assert_msg(findings_has(&f, "long.c:too_long"), "too_long (81 lines) missed: %s", all);
    ck_assert_msg(findings_has(&f, "k.cu:long_kernel"), "long_kernel (85 lines) missed: %s", all);
    for (int i = 0; i < f.n; i++)
        if (!strcmp(f.v[i].key, "long.c:too_long"))
            ck_assert_msg(strstr(f.v[i].detail, "is 81 lines"), "%s", f.v[i].detail);
    free_findings(&f);
}
END_TEST

/* Fixture "clean": modules that include each other one way only, braces in
 * strings, comments and macros, an 80-line function, tables. Nothing found. */
START_TEST(clean_fixture_has_nothing) {
    st_findings c = structure_include_cycles(fixture("clean"));
    st_findings l = structure_long_functions(fixture("clean"));
    ck_assert_msg(c.n == 0, "clean fixture: cycle %s", c.n ? c.v[0].detail : "");
    ck_assert_msg(l.n == 0, "clean fixture: long function %s", l.n ? l.v[0].detail : "");
    free_findings(&c);
    free_findings(&l);
}
END_TEST

/* The real tree: every finding must be on an allow-list, and every entry of
 * the known-failure lists must still occur. */
START_TEST(tree_has_no_include_cycles) {
    st_findings f = structure_include_cycles(FTEST_SOURCE_ROOT);
    char bad[4096] = "";
    for (int i = 0; i < f.n; i++) {
        char one[700];
        snprintf(one, sizeof one, "\n  include cycle among {%s}: %s", f.v[i].key, f.v[i].detail);
        strncat(bad, one, sizeof bad - strlen(bad) - 1);
    }
    ck_assert_msg(!bad[0], "%s", bad);
    free_findings(&f);
}
END_TEST

START_TEST(tree_has_no_long_functions) {
    st_findings f = structure_long_functions(FTEST_SOURCE_ROOT);
    char bad[8192] = "";
    for (int i = 0; i < f.n; i++)
        if (!exempt(f.v[i].key)) {
            char one[600];
            snprintf(one, sizeof one, "\n  %s", f.v[i].detail);
            strncat(bad, one, sizeof bad - strlen(bad) - 1);
        }
    for (const st_exemption *e = STRUCTURE_EXEMPT_FUNCTIONS; e->key; e++)
        if (!findings_has(&f, e->key)) {
            char one[400];
            snprintf(one, sizeof one, "\n  %s is exempt but no longer long: remove it from STRUCTURE_EXEMPT_FUNCTIONS",
                     e->key);
            strncat(bad, one, sizeof bad - strlen(bad) - 1);
        }
    ck_assert_msg(!bad[0], "%s", bad);
    free_findings(&f);
}
END_TEST

/* Fixture "fwenum": estimator/model/m.c names EST_FW_HF on one line (line 3)
 * and in no other; estimator/run.c (a file on the list) on line 2;
 * estimator/frameworks/f.c names it too (allowed there); estimator/report/r.h
 * and estimator/ledger/l.c do not. Two findings. */
START_TEST(fwenum_fixture_has_exactly_the_model_line) {
    st_findings f = structure_framework_mentions(fixture("fwenum"));
    ck_assert_msg(f.n == 2, "want 2 EST_FW_ mentions in the fixture, found %d%s%s", f.n,
                  f.n ? ": " : "", f.n ? f.v[0].key : "");
    ck_assert_msg(findings_has(&f, "estimator/model/m.c:3"), "m.c:3 missed");
    ck_assert_msg(findings_has(&f, "estimator/run.c:2"), "run.c:2 missed");
    free_findings(&f);
}
END_TEST

/* The real tree: model/, the ledgers and the reports ask the registry. */
START_TEST(tree_model_ledgers_reports_name_no_framework) {
    st_findings f = structure_framework_mentions(FTEST_SOURCE_ROOT);
    char bad[3000];
    findings_lines(&f, bad, sizeof bad);
    ck_assert_msg(!bad[0], "%d lines name EST_FW_ outside estimator/frameworks/ (ask fw_registry.h):%s",
                  f.n, bad);
    free_findings(&f);
}
END_TEST

/* Fixture "floors": estimator/e.c includes "door.h" (cli/door.h, line 2) and
 * "calibrate/cal.h" (a path; line 3), and "run.h" (estimator's own, which
 * cli/ has a header of the same stem too: no finding); estimator/sub/s.h
 * includes <door.h> (an angle include: no edge) and names "cal.h" in a
 * comment; cli/door.c includes estimator's run.h and calibrate's cal.h
 * (downward: allowed); calibrate/grid.c includes "door.h" (line 2: up to
 * the front door) and "run.h" (estimator's: allowed). Three findings. */
START_TEST(floors_fixture_has_exactly_the_three_upward_includes) {
    st_findings f = structure_upward_includes(fixture("floors"));
    ck_assert_msg(f.n == 3, "want 3 upward includes in the fixture, found %d%s%s", f.n, f.n ? ": " : "",
                  f.n ? f.v[0].key : "");
    ck_assert_msg(findings_has(&f, "estimator/e.c:2"), "e.c:2 (door.h) missed");
    ck_assert_msg(findings_has(&f, "estimator/e.c:3"), "e.c:3 (calibrate/cal.h) missed");
    ck_assert_msg(findings_has(&f, "calibrate/grid.c:2"), "grid.c:2 (door.h) missed");
    free_findings(&f);
}
END_TEST

/* The real tree: estimator/ takes plain structs and includes nothing of the
 * front door or of calibrate/. */
START_TEST(tree_estimator_includes_nothing_above_it) {
    st_findings f = structure_upward_includes(FTEST_SOURCE_ROOT);
    char bad[3000];
    findings_lines(&f, bad, sizeof bad);
    ck_assert_msg(!bad[0], "%d includes under estimator/ of a header of cli/ or calibrate/, or under "
                  "calibrate/ of a header of cli/ (pass a plain struct down instead, e.g. est_given):%s",
                  f.n, bad);
    free_findings(&f);
}
END_TEST

/* Fixture "vocab": trainer/config.h defines its own attention enum (line 2:
 * TR_ constants in an enum body) and trainer/step.c names TR_ATTN_EAGER
 * (line 3); estimator/run_desc.h aliases EST_PREC_FP32 to FT_PREC_FP32
 * (allowed, line 1), lists EST_OPT_SGD in a multi-line enum body (line 4) and
 * gives EST_LOSS_CHUNKED a number (line 6); trainer/ok.c names
 * TR_CUDA_ATTN_ROWS_H and TR_HAS_ATTENTION (neither is the vocabulary) and
 * FT_ATTN_FLASH (the shared one). Four findings. */
START_TEST(vocab_fixture_has_exactly_the_four_definitions) {
    st_findings f = structure_vocab_definitions(fixture("vocab"));
    ck_assert_msg(f.n == 4, "want 4 vocabulary definitions in the fixture, found %d%s%s", f.n,
                  f.n ? ": " : "", f.n ? f.v[0].key : "");
    ck_assert_msg(findings_has(&f, "trainer/config.h:2"), "config.h:2 (TR_ enum) missed");
    ck_assert_msg(findings_has(&f, "trainer/step.c:3"), "step.c:3 (TR_ATTN_EAGER) missed");
    ck_assert_msg(findings_has(&f, "estimator/run_desc.h:4"), "run_desc.h:4 (enum body) missed");
    ck_assert_msg(findings_has(&f, "estimator/run_desc.h:6"), "run_desc.h:6 (numbered #define) missed");
    free_findings(&f);
}
END_TEST

/* The real tree: one definition of each run enum, common/run_vocab.h's. */
START_TEST(tree_defines_the_run_vocabulary_once) {
    st_findings f = structure_vocab_definitions(FTEST_SOURCE_ROOT);
    char bad[3000];
    findings_lines(&f, bad, sizeof bad);
    ck_assert_msg(!bad[0], "%d lines define a run enum outside common/run_vocab.h (use its FT_ "
                  "constants):%s", f.n, bad);
    free_findings(&f);
}
END_TEST

Suite *suite_structure(void);
Suite *suite_structure(void) {
    Suite *s = suite_create("structure");
    TCase *fx = tcase_create("fixtures");
    tcase_add_test(fx, cycle_fixture_has_exactly_a_b);
    tcase_add_test(fx, long_fixture_has_exactly_the_long_ones);
    tcase_add_test(fx, clean_fixture_has_nothing);
    tcase_add_test(fx, fwenum_fixture_has_exactly_the_model_line);
    tcase_add_test(fx, floors_fixture_has_exactly_the_three_upward_includes);
    tcase_add_test(fx, vocab_fixture_has_exactly_the_four_definitions);
    suite_add_tcase(s, fx);
    TCase *tree = tcase_create("tree");
    tcase_set_timeout(tree, 30);
    tcase_add_test(tree, tree_has_no_include_cycles);
    tcase_add_test(tree, tree_has_no_long_functions);
    tcase_add_test(tree, tree_model_ledgers_reports_name_no_framework);
    tcase_add_test(tree, tree_estimator_includes_nothing_above_it);
    tcase_add_test(tree, tree_defines_the_run_vocabulary_once);
    suite_add_tcase(s, tree);
    return s;
}
