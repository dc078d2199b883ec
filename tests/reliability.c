/* Files that survive a kill (issue 13, docs/reliability.md), at the level of
 * the shared helpers in common/file_io.h: records appended whole by writers
 * killed mid-line, partial tails repaired, a full disk (a file-size limit)
 * leaving no partial line, outputs and profile sets replaced atomically while
 * their writers are killed, inputs that are not regular files refused. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "file_io.h"
#include "json_util.h"
#include "test_util.h"

/* A JSON line of about `bytes` bytes, saying who wrote it (writer, serial). */
static char *make_line(int writer, int serial, size_t bytes) {
    char *s = malloc(bytes + 64);
    int n = snprintf(s, bytes + 64, "{\"writer\":%d,\"serial\":%d,\"pad\":\"", writer, serial);
    for (; (size_t)n < bytes; n++) s[n] = (char)('a' + (writer + n) % 26);
    memcpy(s + n, "\"}", 3);
    return s;
}

/* Every line of `path` is a JSON object and the file ends with a newline;
 * returns the number of lines. */
static size_t all_lines_parse(const char *path) {
    size_t len;
    char *text = test_slurp(path, &len);
    size_t lines = 0;
    ck_assert_msg(len == 0 || text[len - 1] == '\n', "%s does not end with a newline", path);
    for (char *p = text, *end = text + len; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        ck_assert_ptr_nonnull(nl);
        cJSON *j = cJSON_ParseWithLength(p, (size_t)(nl - p));
        ck_assert_msg(j && cJSON_IsObject(j), "%s: line %zu (%zu bytes) does not parse: %.60s", path,
                      lines + 1, (size_t)(nl - p), p);
        cJSON_Delete(j);
        lines++;
        p = nl + 1;
    }
    free(text);
    return lines;
}

/* Kill tests are about what a kill leaves, not about the disk: they run on
 * tmpfs (/dev/shm) where there is one, so fsync costs nothing and a killed
 * writer dies at once. Names start with the folder's 5 characters + "/". */
static void tmp_name(char *buf, size_t n, const char *tag) {
    static int k;
    struct stat st;
    const char *dir = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
                          ? "/dev/shm" : "/tmp";
    snprintf(buf, n, "%s/ftest-rel-%s-%d-%d", dir, tag, (int)getpid(), k++);
}

/* The folder of a tmp_name path, and its base name. */
static void parts(const char *path, char *dir, size_t n, const char **base) {
    const char *slash = strrchr(path, '/');
    snprintf(dir, n, "%.*s", (int)(slash - path), path);
    *base = slash + 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Four writers append 8-16 KiB lines (more than the 4 KiB that stdio writes
 * at once) as fast as they can; they are killed (SIGKILL) at a random moment,
 * 24 rounds. Then one more append repairs whatever tail a kill left, and
 * every line must parse: none glued, interleaved or cut. */
START_TEST(test_append_survives_kill) {
    char path[128];
    tmp_name(path, sizeof path, "append");
    unlink(path);
    srand(12345);
    const int writers = 4, rounds = 24;
    for (int round = 0; round < rounds; round++) {
        pid_t pid[4];
        for (int w = 0; w < writers; w++) {
            pid[w] = fork();
            ck_assert_int_ge(pid[w], 0);
            if (pid[w] == 0) {
                /* Bounded, so a round never writes more than 4 x 64 lines. */
                for (int serial = 0; serial < 64; serial++) {
                    char *line = make_line(w, serial, 8192 + (size_t)(rand() % 8192));
                    char err[256];
                    if (ft_append_line(path, line, strlen(line), NULL, err, sizeof err)) _exit(3);
                    free(line);
                }
                pause();
            }
        }
        usleep((useconds_t)(200 + rand() % 3000));
        for (int w = 0; w < writers; w++) kill(pid[w], SIGKILL);
        for (int w = 0; w < writers; w++) {
            int st;
            waitpid(pid[w], &st, 0);
            ck_assert_msg(WIFSIGNALED(st), "writer %d failed (exit %d)", w, WEXITSTATUS(st));
        }
    }
    char *line = make_line(9, 0, 100);
    char err[256];
    ft_append_info info;
    ck_assert_msg(ft_append_line(path, line, strlen(line), &info, err, sizeof err) == 0, "%s", err);
    free(line);
    size_t n = all_lines_parse(path);
    ck_assert_uint_gt(n, (size_t)rounds); /* the writers did write */
    unlink(path);
}
END_TEST

/* A tail left by a killed writer is removed; a whole record lacking only its
 * newline is kept and terminated, never glued to the next one. */
START_TEST(test_append_repairs_tail) {
    char path[128], err[256];
    tmp_name(path, sizeof path, "tail");
    const char *cut = "{\"a\":1}\n{\"schema\":\"ftest.rec";
    FILE *f = fopen(path, "w");
    fputs(cut, f);
    fclose(f);
    ft_append_info info;
    ck_assert(ft_append_line(path, "{\"b\":2}", 7, &info, err, sizeof err) == 0);
    ck_assert_int_eq(info.dropped_bytes, (int64_t)strlen("{\"schema\":\"ftest.rec"));
    ck_assert(!info.terminated);
    ck_assert_uint_eq(all_lines_parse(path), 2);
    f = fopen(path, "w");
    fputs("{\"a\":1}", f); /* hand-edited, no final newline */
    fclose(f);
    ck_assert(ft_append_line(path, "{\"b\":2}", 7, &info, err, sizeof err) == 0);
    ck_assert(info.terminated);
    ck_assert_int_eq(info.dropped_bytes, 0);
    ck_assert_uint_eq(all_lines_parse(path), 2);
    unlink(path);
}
END_TEST

/* A full disk, as a file-size limit: the append fails and leaves the file as
 * it was (no partial line), in a child so the limit stays there. */
START_TEST(test_append_full_disk) {
    char path[128], err[256];
    tmp_name(path, sizeof path, "full");
    unlink(path);
    ck_assert(ft_append_line(path, "{\"a\":1}", 7, NULL, err, sizeof err) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {1000, 1000};
        setrlimit(RLIMIT_FSIZE, &rl);
        char *line = make_line(1, 1, 4000);
        _exit(ft_append_line(path, line, strlen(line), NULL, err, sizeof err) == 0 ? 0 : 7);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 7, "the append past the limit did not fail");
    struct stat sb;
    ck_assert(stat(path, &sb) == 0);
    ck_assert_int_eq(sb.st_size, 8); /* {"a":1} and its newline, nothing more */
    ck_assert_uint_eq(all_lines_parse(path), 1);
    unlink(path);
}
END_TEST

/* Writers replacing one file with 256 KiB of one letter each time are killed
 * at random moments (24 rounds): the file is always one whole version. */
START_TEST(test_atomic_write_survives_kill) {
    char path[128], err[256];
    tmp_name(path, sizeof path, "atomic");
    const size_t size = 256 * 1024;
    char *buf = malloc(size);
    memset(buf, 'A', size);
    ck_assert(ft_write_atomic(path, buf, size, err, sizeof err) == 0);
    srand(777);
    for (int round = 0; round < 24; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (int k = 0;; k++) {
                memset(buf, 'A' + k % 26, size);
                if (ft_write_atomic(path, buf, size, err, sizeof err)) _exit(3);
            }
        }
        usleep((useconds_t)(1000 + rand() % 6000));
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        ck_assert(WIFSIGNALED(st));
        size_t len;
        char *got = test_slurp(path, &len);
        ck_assert_uint_eq(len, size);
        size_t i = 1;
        while (i < len && got[i] == got[0]) i++; /* one assert per round: Check's are slow */
        ck_assert_msg(i == len, "round %d: byte %zu is %c after %c", round, i, got[i], got[0]);
        free(got);
    }
    /* Temporary files of killed writers are hidden dot files; clean them. */
    char cmd[400], dir[128];
    const char *base;
    parts(path, dir, sizeof dir, &base);
    snprintf(cmd, sizeof cmd, "rm -f %s/.%s.* %s", dir, base, path);
    ck_assert_int_eq(system(cmd), 0);
    free(buf);
}
END_TEST

/* A failed replacement (file-size limit) leaves the old content and no temp file. */
START_TEST(test_atomic_write_full_disk) {
    char path[128], err[256];
    tmp_name(path, sizeof path, "afull");
    ck_assert(ft_write_atomic(path, "old\n", 4, err, sizeof err) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {1000, 1000};
        setrlimit(RLIMIT_FSIZE, &rl);
        char big[5000];
        memset(big, 'x', sizeof big);
        _exit(ft_write_atomic(path, big, sizeof big, err, sizeof err) == 0 ? 0 : 7);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 7);
    size_t len;
    char *got = test_slurp(path, &len);
    ck_assert_uint_eq(len, 4);
    ck_assert(!memcmp(got, "old\n", 4));
    free(got);
    char cmd[400], dir[128];
    const char *base;
    parts(path, dir, sizeof dir, &base);
    snprintf(cmd, sizeof cmd, "ls -a %s | grep '^\\.%s\\.' >/dev/null", dir, base);
    ck_assert_msg(system(cmd) != 0, "a temporary file was left behind");
    unlink(path);
    /* Never renamed over something that is not a regular file. */
    ck_assert(ft_write_atomic("/dev/null", "x", 1, err, sizeof err) == -1);
    ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
}
END_TEST

/* A profile as ftest fit writes it, of generation `gen` (a string literal). */
#define PROFILE(gen) "{\"schema\":\"ftest.profile/1\",\"gen\":" gen "}\n"

/* A profile set (two files of one generation) replaced by a writer killed at
 * random moments (24 rounds): both files always come from one generation. */
START_TEST(test_profile_set_survives_kill) {
    char dir[128], err[256];
    tmp_name(dir, sizeof dir, "set");
    const char *names[2] = {"pytorch.json", "deepspeed.json"};
    const char *gen0[2] = {PROFILE("0"), PROFILE("0")};
    ck_assert_msg(ft_replace_dir(dir, names, gen0, 2, err, sizeof err) == 0, "%s", err);
    srand(4242);
    for (int round = 0; round < 24; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (int k = 1;; k++) {
                char a[80], b[80];
                snprintf(a, sizeof a, PROFILE("%d"), k);
                snprintf(b, sizeof b, PROFILE("%d"), k);
                const char *texts[2] = {a, b};
                if (ft_replace_dir(dir, names, texts, 2, err, sizeof err)) _exit(3);
            }
        }
        usleep((useconds_t)(1000 + rand() % 6000));
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        ck_assert_msg(WIFSIGNALED(st), "the writer failed");
        char p1[256], p2[256];
        snprintf(p1, sizeof p1, "%s/%s", dir, names[0]);
        snprintf(p2, sizeof p2, "%s/%s", dir, names[1]);
        char *t1 = test_slurp(p1, NULL), *t2 = test_slurp(p2, NULL);
        ck_assert_msg(!strcmp(t1, t2), "round %d: a mixed set: %s vs %s", round, t1, t2);
        free(t1);
        free(t2);
    }
    char cmd[400], parent[128];
    const char *base;
    parts(dir, parent, sizeof parent, &base);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s/.%s.*", dir, parent, base);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* The set replaces the directory whole (no stale profile survives), and a
 * directory holding anything but profiles is refused untouched. */
START_TEST(test_profile_set_replaces_whole) {
    char dir[128], err[256], p[256];
    tmp_name(dir, sizeof dir, "whole");
    const char *n3[3] = {"a.json", "b.json", "fsdp.json"}, *t3[3] = {PROFILE("1"), PROFILE("1"), PROFILE("1")};
    ck_assert(ft_replace_dir(dir, n3, t3, 3, err, sizeof err) == 0);
    const char *n2[2] = {"a.json", "b.json"}, *t2[2] = {PROFILE("2"), PROFILE("2")};
    ck_assert(ft_replace_dir(dir, n2, t2, 2, err, sizeof err) == 0);
    snprintf(p, sizeof p, "%s/fsdp.json", dir);
    ck_assert_msg(access(p, F_OK) != 0, "a profile of the old set survived");
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    FILE *f = fopen(p, "w");
    fputs("mine", f);
    fclose(f);
    ck_assert(ft_replace_dir(dir, n2, t2, 2, err, sizeof err) == -1);
    ck_assert_ptr_nonnull(strstr(err, "notes.txt"));
    ck_assert_int_eq(access(p, F_OK), 0);
    ck_assert(ft_replace_dir(".", n2, t2, 2, err, sizeof err) == -1);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Issue 20, items 1 and 2: a --out that is a link to a folder, or a folder of
 * *.json files that are not profiles (a copy of models/), is refused and left
 * as it was; before, the link was replaced and the linked folder's files
 * deleted through it, and the model configs were replaced by profiles. */
START_TEST(test_profile_set_never_takes_user_files) {
    char dir[128], link[160], err[512], p[256], cmd[600];
    tmp_name(dir, sizeof dir, "mine");
    snprintf(link, sizeof link, "%s.link", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s %s %s/ && ln -s %s %s", dir,
             test_repo_path("models/llama3-8b.json"), test_repo_path("models/tiny-llama.json"), dir, dir, link);
    ck_assert_int_eq(system(cmd), 0);
    const char *n2[2] = {"pytorch.json", "deepspeed.json"}, *t2[2] = {PROFILE("1"), PROFILE("1")};
    /* The folder of model configs, named directly and through the link. */
    ck_assert(ft_replace_dir(dir, n2, t2, 2, err, sizeof err) == -1);
    ck_assert_msg(strstr(err, "not a profile"), "%s", err);
    ck_assert(ft_replace_dir(link, n2, t2, 2, err, sizeof err) == -1);
    ck_assert_msg(strstr(err, "symbolic link"), "%s", err);
    snprintf(p, sizeof p, "%s/", link); /* a trailing slash names the link too */
    ck_assert(ft_replace_dir(p, n2, t2, 2, err, sizeof err) == -1);
    struct stat st;
    ck_assert(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    snprintf(cmd, sizeof cmd, "cmp -s %s %s/llama3-8b.json && cmp -s %s %s/tiny-llama.json && "
             "[ $(ls -A %s | wc -l) = 2 ]", test_repo_path("models/llama3-8b.json"), dir,
             test_repo_path("models/tiny-llama.json"), dir, dir);
    ck_assert_msg(system(cmd) == 0, "the user's files were changed");
    /* Even a link to a folder of profiles is refused: its files stay. */
    snprintf(cmd, sizeof cmd, "rm -f %s/*.json", dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(p, sizeof p, "%s/pytorch.json", dir);
    FILE *f = fopen(p, "w");
    fputs(PROFILE("0"), f);
    fclose(f);
    ck_assert(ft_replace_dir(link, n2, t2, 2, err, sizeof err) == -1);
    char *t = test_slurp(p, NULL);
    ck_assert_str_eq(t, PROFILE("0"));
    free(t);
    /* Named directly, the folder of profiles is replaced. */
    ck_assert_msg(ft_replace_dir(dir, n2, t2, 2, err, sizeof err) == 0, "%s", err);
    t = test_slurp(p, NULL);
    ck_assert_str_eq(t, PROFILE("1"));
    free(t);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, link);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Inputs: a FIFO, a device and a directory are refused at once (never a hang,
 * never 1 GB read), a file over the cap is refused before it is read. */
START_TEST(test_inputs_are_regular_files) {
    char fifo[128], err[256];
    tmp_name(fifo, sizeof fifo, "fifo");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    double t0 = now_s();
    size_t len;
    ck_assert_ptr_null(ft_read_file(fifo, 1 << 20, &len, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
    ck_assert_ptr_null(ft_read_file("/dev/zero", 1 << 20, &len, err, sizeof err));
    ck_assert_ptr_null(ft_read_file("/tmp", 1 << 20, &len, err, sizeof err));
    ck_assert(now_s() - t0 < 2);
    unlink(fifo);
    char path[128];
    tmp_name(path, sizeof path, "big");
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 2000; i++) fputc('x', f);
    fclose(f);
    ck_assert_ptr_null(ft_read_file(path, 1000, &len, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "larger than 1000"));
    char *t = ft_read_file(path, 2000, &len, err, sizeof err);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(len, 2000);
    free(t);
    unlink(path);
    /* Record files: a device or a missing folder is refused before any work. */
    ck_assert(ft_check_appendable("/dev/full", err, sizeof err) == -1);
    ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
    ck_assert(ft_check_appendable("/nonexistent/dir/r.jsonl", err, sizeof err) == -1);
    ck_assert(ft_check_appendable(path, err, sizeof err) == 0);
    ck_assert_msg(access(path, F_OK) != 0, "checking created the file");
}
END_TEST

/* docs/reliability.md's table of promises names one test per row, as
 * `tests/FILE.c:CASE` (a case name of the reliability suites' tables, or a
 * START_TEST function of another file): every row names a test that exists,
 * once, and every case of tests/reliability*.c has its row. */
START_TEST(test_doc_table_matches_suites) {
    char *doc = test_slurp(test_repo_path("docs/reliability.md"), NULL);
    char *table = strstr(doc, "## Promises and their tests");
    ck_assert_ptr_nonnull(table);
    char *next = strstr(table + 3, "\n## ");
    if (next) *next = '\0'; /* the table's section only */
    char refs[128][160];
    size_t nrefs = 0;
    for (const char *p = strstr(table, "`tests/"); p && nrefs < 128; p = strstr(p + 1, "`tests/")) {
        const char *end = strchr(p + 1, '`');
        ck_assert_ptr_nonnull(end);
        snprintf(refs[nrefs], sizeof refs[0], "%.*s", (int)(end - p - 1), p + 1);
        for (size_t k = 0; k < nrefs; k++) ck_assert_msg(strcmp(refs[k], refs[nrefs]), "%s twice", refs[k]);
        char file[160], want[200];
        snprintf(file, sizeof file, "%s", refs[nrefs]);
        char *colon = strchr(file, ':');
        ck_assert_msg(colon != NULL, "%s names no case", refs[nrefs]);
        *colon = '\0';
        char *src = test_slurp(test_repo_path(file), NULL);
        if (!strncmp(colon + 1, "test_", 5)) snprintf(want, sizeof want, "START_TEST(%s)", colon + 1);
        else snprintf(want, sizeof want, "{\"%s\", test_", colon + 1);
        ck_assert_msg(strstr(src, want), "%s: no %s", file, want);
        free(src);
        nrefs++;
    }
    const char *suites[] = {"tests/reliability.c", "tests/reliability_cli.c", "tests/reliability_input.c",
                            "tests/reliability_calibrate.c", "tests/reliability_ftrain.c"};
    for (size_t f = 0; f < sizeof suites / sizeof suites[0]; f++) {
        char *src = test_slurp(test_repo_path(suites[f]), NULL);
        for (const char *p = strstr(src, "{\""); p; p = strstr(p + 1, "{\"")) {
            const char *q = strchr(p + 2, '"');
            if (!q || strncmp(q, "\", test_", 8)) continue;
            char ref[160];
            snprintf(ref, sizeof ref, "%s:%.*s", suites[f], (int)(q - p - 2), p + 2);
            bool found = false;
            for (size_t k = 0; k < nrefs && !found; k++) found = !strcmp(refs[k], ref);
            ck_assert_msg(found, "%s has no row in docs/reliability.md", ref);
        }
        free(src);
    }
    free(doc);
}
END_TEST

Suite *suite_reliability(void);
Suite *suite_reliability(void) {
    Suite *s = suite_create("reliability");
    const struct {
        const char *name;
        const TTest *test;
    } cases[] = {
        {"append_kill", test_append_survives_kill},
        {"append_tail", test_append_repairs_tail},
        {"append_full", test_append_full_disk},
        {"atomic_kill", test_atomic_write_survives_kill},
        {"atomic_full", test_atomic_write_full_disk},
        {"set_kill", test_profile_set_survives_kill},
        {"set_whole", test_profile_set_replaces_whole},
        {"set_user_files", test_profile_set_never_takes_user_files},
        {"inputs", test_inputs_are_regular_files},
        {"doc_table", test_doc_table_matches_suites},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
    return s;
}
