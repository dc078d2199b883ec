/* `make install PREFIX=...` (issue 12, item 4): installs into a fresh folder,
 * then uses what was installed as a user would, from another folder: the main
 * job answered from the installed catalogs (a model that exists only in the
 * installed copy proves which data was read), man pages whose text is the
 * installed binaries' --help, bash completion for options, models and GPUs. */
#include <check.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#ifndef FTEST_SOURCE_ROOT
#define FTEST_SOURCE_ROOT "."
#endif

/* PREFIX: a folder in BUILD, emptied at the start, so a failed run leaves
 * nothing outside the build folder. */
static char prefix[PATH_MAX + 32];
static char out[1 << 16];

/* Runs a shell command; its stdout (and stderr) into `out`; the exit status. */
static int sh(const char *cmd) {
    char full[4200];
    snprintf(full, sizeof full, "{ %s ; } 2>&1", cmd);
    FILE *p = popen(full, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
static char cmdbuf[4096];
#define SH(...) (snprintf(cmdbuf, sizeof cmdbuf, __VA_ARGS__), sh(cmdbuf))

/* The body of a page mkman.sh wrote (between .nf and .fi), roff escapes undone. */
static char *man_body(const char *page) {
    char *text = test_slurp(page, NULL);
    char *start = strstr(text, "\n.nf\n");
    ck_assert_ptr_nonnull(start);
    start += 5;
    char *end = strstr(start, "\n.fi\n");
    ck_assert_ptr_nonnull(end);
    end[1] = '\0';
    char *body = malloc(strlen(start) + 1), *w = body;
    bool line_start = true;
    for (const char *c = start; *c; c++) {
        if (line_start && c[0] == '\\' && c[1] == '&') {
            c++;
            line_start = false;
            continue;
        }
        if (c[0] == '\\' && c[1] == 'e') {
            *w++ = '\\';
            c++;
        } else {
            *w++ = *c;
        }
        line_start = *c == '\n';
    }
    *w = '\0';
    free(text);
    return body;
}

START_TEST(test_make_install) {
    char build[PATH_MAX]; /* absolute: the installed binaries are run from / */
    ck_assert_ptr_nonnull(realpath(test_build_dir(), build));
    snprintf(prefix, sizeof prefix, "%s/install-test", build);
    ck_assert(SH("rm -rf %s && mkdir -p %s", prefix, prefix) == 0);
    /* The binaries under test are the ones beside this runner (BUILD). They must
     * be current: make would otherwise rebuild them with its default flags
     * (not, say, the sanitizers' of `make asan`). */
    SH("make -n --no-print-directory -C %s BUILD=%s PREFIX=%s install | grep -c -e ' -c ' -e 'ar rcs'",
       FTEST_SOURCE_ROOT, test_build_dir(), prefix);
    ck_assert_msg(atoi(out) == 0, "the binaries in %s are older than their sources: build them first",
                  test_build_dir());
    ck_assert_msg(SH("make --no-print-directory -s -C %s BUILD=%s PREFIX=%s install", FTEST_SOURCE_ROOT,
                     test_build_dir(), prefix) == 0, "make install: %.1500s", out);

    /* The main job from another folder, with nothing pointing at the sources. */
    ck_assert_msg(SH("cd / && env -u FTEST_DATA_DIR %s/bin/ftest --model llama3-8b --gpus 8 --seq 2048",
                     prefix) == 0, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "recommended:"));
    /* The installed catalogs are the ones read: a model only they hold. */
    ck_assert(SH("cp %s/share/ftest/models/llama3-8b.json %s/share/ftest/models/installed-only-8b.json",
                 prefix, prefix) == 0);
    ck_assert_msg(SH("cd / && env -u FTEST_DATA_DIR %s/bin/ftest --model installed-only-8b --gpus 8", prefix) == 0, "%s", out);
    ck_assert(SH("cd / && env -u FTEST_DATA_DIR %s/bin/ftest constants --gpu h100-80gb", prefix) == 0);
    ck_assert(SH("cd / && %s/bin/ftrain --help > /dev/null", prefix) == 0);

    /* Man pages: the body is --help, byte for byte. */
    const char *progs[] = {"ftest", "ftrain"};
    for (int i = 0; i < 2; i++) {
        char page[1024];
        snprintf(page, sizeof page, "%s/share/man/man1/%s.1", prefix, progs[i]);
        char *body = man_body(page);
        char bin[1024];
        snprintf(bin, sizeof bin, "%s/bin/%s", prefix, progs[i]);
        ck_assert(SH("%s --help", bin) == 0);
        ck_assert_msg(!strcmp(body, out), "%s.1 differs from %s --help", progs[i], progs[i]);
        free(body);
        /* SEE ALSO names the other page, never itself; the docs the help
         * names are installed where the page says (issue 20, item 20). */
        char *text = test_slurp(page, NULL);
        const char *see = strstr(text, ".SH SEE ALSO\n");
        ck_assert_ptr_nonnull(see);
        char self[32], other[32];
        snprintf(self, sizeof self, ".BR %s (1)", progs[i]);
        snprintf(other, sizeof other, ".BR %s (1)", progs[1 - i]);
        ck_assert_msg(!strstr(see, self) && strstr(see, other), "%s.1 SEE ALSO: %s", progs[i], see);
        ck_assert_ptr_nonnull(strstr(text, "share/doc/ftest"));
        free(text);
    }
    ck_assert_msg(SH("test -f %s/share/doc/ftest/reliability.md && test -f %s/share/doc/ftest/README.md", prefix,
                     prefix) == 0, "the docs the help names are not installed");

    /* Completion: options, models and GPUs, asked as bash would. */
    static const struct {
        const char *words, *want;
    } comp[] = {
        {"ftest --gpu a1", "a100-40gb a100-80gb"},
        {"ftest --model llama3-8", "llama3-8b"},
        {"ftest --model installed-o", "installed-only-8b"},
        {"ftest --max-b", "--max-batch"},
        {"ftest --precision bf16-", "bf16-mixed"},
        {"ftest swe", "sweep"},
        {"ftrain --grad-a", "--grad-accum"},
    };
    for (size_t k = 0; k < sizeof comp / sizeof comp[0]; k++) {
        char script[2048];
        snprintf(script, sizeof script,
                 "cd / && PATH=%s/bin:$PATH bash -c 'source %s/share/bash-completion/completions/ftest; "
                 "COMP_WORDS=(%s); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _ftest_complete; "
                 "echo \"${COMPREPLY[*]}\"'",
                 prefix, prefix, comp[k].words);
        ck_assert(sh(script) == 0);
        ck_assert_msg(strstr(out, comp[k].want), "`%s` completes to \"%s\", not \"%s\"", comp[k].words, out,
                      comp[k].want);
    }
    SH("rm -rf %s", prefix);
}
END_TEST

Suite *suite_install(void);
Suite *suite_install(void) {
    Suite *s = suite_create("install");
    TCase *tc = tcase_create("make install");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_make_install);
    suite_add_tcase(s, tc);
    return s;
}
