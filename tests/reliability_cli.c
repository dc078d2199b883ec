/* Nothing lost, nothing silent (issue 13), as a user meets the binaries:
 * ftrain keeps a record per window and stops at a non-finite loss; bad input
 * and unwritable record files create nothing; ftest check refuses empty,
 * blank and NUL-holding files and reports on stderr; output that cannot be
 * written exits 2; options that would do nothing are refused; CSV/SVG outputs
 * survive a full disk; fit needs --out and says when it wrote nothing; a
 * record's model path never leaves the record's folder. */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>

#include "cli.h"
#include "json_util.h"
#include "model_config.h"
#include "record.h"
#include "test_util.h"

static char scratch[128]; /* a fresh folder per test */

static void setup(void) {
    snprintf(scratch, sizeof scratch, "/tmp/ftest-relcli-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(scratch));
}

static void teardown(void) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", scratch);
    if (system(cmd) != 0) {}
}

typedef struct {
    int status;      /* exit status, or 128 + signal */
    char out[1 << 18]; /* stdout, cut */
    char err[4096];  /* stderr, cut */
} shell_result;

/* Runs `cmd` with sh in the scratch folder; $FT and $FR name the binaries. */
static shell_result *sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static shell_result *sh(const char *fmt, ...) {
    static shell_result r;
    memset(&r, 0, sizeof r);
    char body[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    const char *b = test_build_dir();
    char bin[1100];
    if (b[0] == '/') snprintf(bin, sizeof bin, "%s", b);
    else snprintf(bin, sizeof bin, "%s/%s", getcwd(cmd, sizeof cmd), b);
    snprintf(cmd, sizeof cmd, "cd %s && FT=%s/ftest FR='%s/ftrain --threads 1 --quiet' timeout 60 sh -c '%s' "
             ">%s/.out 2>%s/.err", scratch, bin, bin, body, scratch, scratch);
    int st = system(cmd);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char p[256];
    snprintf(p, sizeof p, "%s/.out", scratch);
    FILE *f = fopen(p, "r");
    if (f) {
        r.out[fread(r.out, 1, sizeof r.out - 1, f)] = '\0';
        fclose(f);
    }
    snprintf(p, sizeof p, "%s/.err", scratch);
    f = fopen(p, "r");
    if (f) {
        r.err[fread(r.err, 1, sizeof r.err - 1, f)] = '\0';
        fclose(f);
    }
    return &r;
}

/* test_repo_path made absolute: the commands run in the scratch folder. */
static const char *repo(const char *rel) {
    static char buf[4][4096];
    static int k;
    char *b = buf[k++ % 4];
    ck_assert_msg(realpath(test_repo_path(rel), b) != NULL, "no %s", rel);
    return b;
}

static bool exists(const char *name) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", scratch, name);
    return access(p, F_OK) == 0;
}

/* The records of a file in the scratch folder, parsed as JSON; count returned. */
static int records(const char *name, cJSON *out[], int max) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", scratch, name);
    size_t len;
    char *text = test_slurp(p, &len);
    int n = 0;
    for (char *s = strtok(text, "\n"); s && n < max; s = strtok(NULL, "\n")) {
        out[n] = cJSON_Parse(s);
        ck_assert_msg(out[n] != NULL, "%s: line %d does not parse", name, n + 1);
        n++;
    }
    free(text);
    return n;
}

static void free_records(cJSON *r[], int n) {
    for (int i = 0; i < n; i++) cJSON_Delete(r[i]);
}

/* ---- ftrain keeps what it measured ---------------------------------------------- */

/* A record per window ("final": false, one run id, steps_done counting up) and
 * a final one; ftest check compares the final one and passes. */
START_TEST(test_ftrain_window_records) {
    shell_result *r = sh("$FR --steps 4 --record r.jsonl --record-window 0");
    ck_assert_msg(r->status == 0, "exit %d: %s", r->status, r->err);
    cJSON *rec[8];
    int n = records("r.jsonl", rec, 8);
    ck_assert_int_eq(n, 4);
    const char *id = cJSON_GetObjectItem(rec[0], "run_id")->valuestring;
    for (int i = 0; i < n; i++) {
        ck_assert(cJSON_IsBool(cJSON_GetObjectItem(rec[i], "final")));
        ck_assert_int_eq(cJSON_IsTrue(cJSON_GetObjectItem(rec[i], "final")), i == n - 1);
        ck_assert_str_eq(cJSON_GetObjectItem(rec[i], "run_id")->valuestring, id);
        cJSON *m = cJSON_GetObjectItem(rec[i], "measured");
        ck_assert_int_eq((int)cJSON_GetObjectItem(m, "steps_done")->valuedouble, i + 1);
        ck_assert(cJSON_IsArray(cJSON_GetObjectItem(m, "ranks")));
    }
    free_records(rec, n);
    r = sh("$FT check r.jsonl");
    ck_assert_msg(r->status == 0, "check exit %d: %s", r->status, r->err);
    ck_assert_ptr_nonnull(strstr(r->out, "1 records, 0 outside tolerance, 0 unreadable, 3 window records"));
}
END_TEST

/* Killed mid-run (SIGKILL, 6 times into one file), ftrain leaves only whole
 * records: every line parses as a record, with what was measured so far. */
START_TEST(test_ftrain_killed_keeps_windows) {
    for (int round = 0; round < 6; round++) {
        shell_result *r = sh("$FR --steps 100000 --record r.jsonl --record-window 0 & "
                             "p=$!; n=0; while [ $(cat r.jsonl 2>/dev/null | wc -l) -lt %d ] && [ $n -lt 2000 ]; "
                             "do sleep 0.005; n=$((n+1)); done; kill -9 $p; wait $p; exit 0", 2 * round + 2);
        ck_assert_int_eq(r->status, 0);
    }
    char p[256];
    snprintf(p, sizeof p, "%s/r.jsonl", scratch);
    size_t len;
    char *text = test_slurp(p, &len);
    int n = 0;
    for (char *s = text, *end = text + len; s < end; n++) {
        char *nl = memchr(s, '\n', (size_t)(end - s));
        if (!nl) break; /* a tail cut by the last kill: the next append removes it */
        est_record rec;
        char err[256];
        ck_assert_msg(est_record_parse(s, (size_t)(nl - s), NULL, &rec, err, sizeof err) == 0, "line %d: %s",
                      n + 1, err);
        ck_assert(!rec.final);
        ck_assert_uint_ge(rec.rank_count, 1);
        est_record_free(&rec);
        s = nl + 1;
    }
    free(text);
    ck_assert_int_ge(n, 12); /* each round waited for two more records */
}
END_TEST

/* A record file left ending in a fragment (a writer killed mid-line): ftest
 * check names the interrupted write; the next ftrain removes the fragment,
 * says so, and the file checks clean (before, the record was glued on). */
START_TEST(test_ftrain_repairs_cut_file) {
    shell_result *r = sh("$FR --steps 2 --record r.jsonl && head -c 700 r.jsonl > c.jsonl && "
                         "cat r.jsonl c.jsonl > cut.jsonl && $FT check cut.jsonl");
    ck_assert_int_eq(r->status, 2);
    ck_assert_ptr_nonnull(strstr(r->err, "interrupted write"));
    r = sh("$FR --steps 2 --record cut.jsonl && $FT check cut.jsonl");
    ck_assert_msg(r->status == 0, "exit %d: %s", r->status, r->err);
    ck_assert_ptr_nonnull(strstr(r->err, "700-byte partial record"));
    ck_assert_ptr_nonnull(strstr(r->out, "2 records, 0 outside tolerance, 0 unreadable"));
}
END_TEST

/* Bad input creates no record file; a record path that cannot take records
 * (a device, a directory, a missing folder) is refused before training. */
START_TEST(test_ftrain_refuses_up_front) {
    shell_result *r = sh("$FR --record new.jsonl --data /nonexistent/tokens.bin");
    ck_assert_int_eq(r->status, 2);
    ck_assert_msg(!exists("new.jsonl"), "a failed run created its record file");
    r = sh("$FR --record new.jsonl --seq 4096");
    ck_assert_int_eq(r->status, 2);
    ck_assert(!exists("new.jsonl"));
    const char *bad[] = {"/dev/full", ".", "/nonexistent/dir/r.jsonl"};
    for (int i = 0; i < 3; i++) {
        /* 10^6 steps: refused at once or the timeout says it trained first. */
        r = sh("$FR --steps 1000000 --record %s", bad[i]);
        ck_assert_msg(r->status == 2, "--record %s: exit %d", bad[i], r->status);
        ck_assert_msg(strstr(r->err, "record file") && !strchr(strchr(r->err, '\n') + 1, '\n'),
                      "--record %s: %s", bad[i], r->err);
    }
    /* A FIFO as data is refused, not waited on. */
    r = sh("mkfifo f && $FR --data f");
    ck_assert_int_eq(r->status, 2);
    ck_assert_ptr_nonnull(strstr(r->err, "not a regular file"));
    /* --record-window without --record would do nothing. */
    r = sh("$FR --record-window 5");
    ck_assert_int_eq(r->status, 2);
}
END_TEST

/* Writes a tiny-llama safetensors file whose final norm weight is NaN. */
static void nan_weights(const char *path) {
    ft_model m;
    char err[256];
    ck_assert(ft_model_load("tiny-llama", &m, err, sizeof err) == 0);
    const int64_t h = m.hidden_size, I = m.intermediate_size, V = m.vocab_size;
    const int64_t qd = m.num_heads * m.head_dim, kvd = m.num_kv_heads * m.head_dim;
    struct {
        char name[80];
        int64_t r, c;
    } t[64];
    int n = 0;
#define ADD(nm, rows, cols) (snprintf(t[n].name, sizeof t[n].name, "%s", nm), t[n].r = rows, t[n++].c = cols)
    ADD("model.embed_tokens.weight", V, h);
    for (int64_t l = 0; l < m.num_layers; l++) {
        const char *suffix[] = {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                "post_attention_layernorm.weight", "mlp.gate_proj.weight",
                                "mlp.up_proj.weight", "mlp.down_proj.weight"};
        const int64_t rows[] = {h, qd, kvd, kvd, h, h, I, I, h}, cols[] = {0, h, h, h, qd, 0, h, h, I};
        for (int k = 0; k < 9; k++) {
            char nm[80];
            snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, suffix[k]);
            ADD(nm, rows[k], cols[k]);
        }
    }
    ADD("model.norm.weight", h, 0);
    ADD("lm_head.weight", V, h);
#undef ADD
    char hdr[8192];
    size_t hl = (size_t)snprintf(hdr, sizeof hdr, "{");
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t bytes = 4 * t[i].r * (t[i].c ? t[i].c : 1);
        if (t[i].c)
            hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],"
                                   "\"data_offsets\":[%lld,%lld]}", i ? "," : "", t[i].name, (long long)t[i].r,
                                   (long long)t[i].c, (long long)off, (long long)(off + bytes));
        else
            hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],"
                                   "\"data_offsets\":[%lld,%lld]}", i ? "," : "", t[i].name, (long long)t[i].r,
                                   (long long)off, (long long)(off + bytes));
        off += bytes;
    }
    hdr[hl++] = '}';
    while (hl % 8) hdr[hl++] = ' ';
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (int b = 0; b < 8; b++) fputc((int)((uint64_t)hl >> (8 * b)) & 0xff, f);
    fwrite(hdr, 1, hl, f);
    for (int i = 0; i < n; i++) {
        float v = strcmp(t[i].name, "model.norm.weight") ? 0.02f : NAN;
        for (int64_t k = 0; k < t[i].r * (t[i].c ? t[i].c : 1); k++) fwrite(&v, 4, 1, f);
    }
    ck_assert_int_eq(fclose(f), 0);
}

/* NaN weights: ftrain stops at step 1 with exit 1 and a final record saying
 * why (before, it trained on, printed "loss nan" and exited 0). */
START_TEST(test_ftrain_stops_at_nan) {
    char p[256];
    snprintf(p, sizeof p, "%s/nan.safetensors", scratch);
    nan_weights(p);
    shell_result *r = sh("$FR --init nan.safetensors --steps 50 --record r.jsonl");
    ck_assert_msg(r->status == 1, "exit %d: %s", r->status, r->err);
    ck_assert_ptr_nonnull(strstr(r->err, "non-finite loss"));
    cJSON *rec[4];
    int n = records("r.jsonl", rec, 4);
    ck_assert_int_eq(n, 1);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(rec[0], "final")));
    cJSON *m = cJSON_GetObjectItem(rec[0], "measured");
    ck_assert_int_eq((int)cJSON_GetObjectItem(m, "steps_done")->valuedouble, 1);
    ck_assert_ptr_nonnull(strstr(cJSON_GetObjectItem(m, "stopped")->valuestring, "non-finite loss"));
    free_records(rec, n);
}
END_TEST

/* The last --data/--init wins, "synthetic"/"seeded" included (issue 14 item 5). */
START_TEST(test_ftrain_last_data_wins) {
    static tr_config c;
    char err[256];
    bool help;
    char *argv[] = {"ftrain", "--data", "/some/tokens.bin", "--data", "synthetic", "--init", "w.safetensors",
                    "--init", "seeded", NULL};
    ck_assert_msg(tr_cli_parse(9, argv, &c, &help, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(c.data_path, "");
    ck_assert_str_eq(c.init_path, "");
}
END_TEST

/* A record written with a relative --model path checks from anywhere: the
 * config travels inside the record (issue 14 item 5). */
START_TEST(test_ftrain_relative_model_checks_anywhere) {
    shell_result *r = sh("mkdir -p run && cp %s run/cfg.json && cd run && $FR --model ./cfg.json --steps 2 "
                         "--record ../r.jsonl", repo("models/tiny-llama-bias.json"));
    ck_assert_msg(r->status == 0, "exit %d: %s", r->status, r->err);
    r = sh("cd / && $FT check %s/r.jsonl", scratch);
    ck_assert_msg(r->status == 0, "check exit %d: %s%s", r->status, r->out, r->err);
}
END_TEST

/* ---- ftest check never succeeds silently ---------------------------------------- */

/* The first committed ftrain record, and the same made to fail its check. */
static void good_and_failing(char *good, char *bad, size_t n) {
    FILE *f = fopen(repo("calibrate/records/ftrain-cpu.jsonl"), "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(good, (int)n, f));
    fclose(f);
    good[strcspn(good, "\n")] = '\0';
    snprintf(bad, n, "%s", good);
    char *p = strstr(bad, "\"peak_allocated_bytes\":");
    ck_assert_ptr_nonnull(p);
    p += strlen("\"peak_allocated_bytes\":");
    /* A measured peak of 1 byte: no estimate is within 0 bytes of it. */
    char *q = p + strspn(p, "0123456789");
    memmove(p + 1, q, strlen(q) + 1);
    *p = '1';
}

START_TEST(test_check_empty_blank_nul) {
    shell_result *r = sh(": > e.jsonl; $FT check e.jsonl");
    ck_assert_int_eq(r->status, 2);
    ck_assert_ptr_nonnull(strstr(r->err, "holds no records"));
    r = sh("printf \"\\n  \\n\\n\\r\\n\" > b.jsonl; $FT check b.jsonl");
    ck_assert_int_eq(r->status, 2);
    ck_assert_ptr_nonnull(strstr(r->err, "holds no records"));
    /* A NUL byte, then a record that fails: the failure is still found. */
    char good[8192], bad[8192], p[256];
    good_and_failing(good, bad, sizeof good);
    snprintf(p, sizeof p, "%s/n.jsonl", scratch);
    FILE *f = fopen(p, "wb");
    fprintf(f, "%s\nab", good);
    fputc(0, f);
    fprintf(f, "cd\n%s\n", bad);
    fclose(f);
    r = sh("$FT check n.jsonl");
    ck_assert_int_eq(r->status, 2);
    ck_assert_msg(strstr(r->out, "FAIL") != NULL, "the record after the NUL was not checked: %s", r->out);
    ck_assert_ptr_nonnull(strstr(r->err, "NUL"));
    ck_assert_msg(strstr(r->out, "ERROR") == NULL, "errors belong on stderr");
    /* Without the NUL line: exit 1, outside tolerance. */
    f = fopen(p, "wb");
    fprintf(f, "%s\n%s\n", good, bad);
    fclose(f);
    r = sh("$FT check n.jsonl");
    ck_assert_int_eq(r->status, 1);
    /* Devices and FIFOs are refused, not read. */
    r = sh("$FT check /dev/zero");
    ck_assert_int_eq(r->status, 2);
    r = sh("mkfifo ff && $FT check ff");
    ck_assert_int_eq(r->status, 2);
}
END_TEST

/* A record's model path stays under the record file's folder. */
START_TEST(test_check_model_path_confined) {
    char good[8192], bad[8192], line[8300], p[256];
    good_and_failing(good, bad, sizeof good);
    const char *cases[] = {"/etc/passwd", "../cfg.json", "sub/../../cfg.json", "link/cfg.json"};
    snprintf(p, sizeof p, "%s/in", scratch);
    mkdir(p, 0755);
    shell_result *r = sh("cp %s cfg.json && mkdir -p in/sub && cp cfg.json in/sub/cfg.json && ln -s .. in/link",
                         repo("models/tiny-llama.json"));
    ck_assert_int_eq(r->status, 0);
    for (int i = 0; i < 4; i++) {
        snprintf(line, sizeof line, "%s", good);
        char *m = strstr(line, "\"model\":\"tiny-llama\"");
        ck_assert_ptr_nonnull(m);
        char rest[8192];
        snprintf(rest, sizeof rest, "%s", m + strlen("\"model\":\"tiny-llama\""));
        snprintf(m, sizeof line - (size_t)(m - line), "\"model\":\"%s\"%s", cases[i], rest);
        snprintf(p, sizeof p, "%s/in/r.jsonl", scratch);
        FILE *f = fopen(p, "w");
        fprintf(f, "%s\n", line);
        fclose(f);
        r = sh("$FT check in/r.jsonl");
        ck_assert_msg(r->status == 2, "model %s: exit %d", cases[i], r->status);
        ck_assert_msg(strstr(r->err, "config.model"), "model %s: %s", cases[i], r->err);
    }
    /* A path under the folder is fine. */
    snprintf(line, sizeof line, "%s", good);
    char *m = strstr(line, "\"model\":\"tiny-llama\"");
    char rest[8192];
    snprintf(rest, sizeof rest, "%s", m + strlen("\"model\":\"tiny-llama\""));
    snprintf(m, sizeof line - (size_t)(m - line), "\"model\":\"sub/cfg.json\"%s", rest);
    FILE *f = fopen(p, "w");
    fprintf(f, "%s\n", line);
    fclose(f);
    r = sh("cd / && $FT check %s/in/r.jsonl", scratch);
    ck_assert_msg(r->status == 0, "exit %d: %s %s", r->status, r->out, r->err);
}
END_TEST

/* ---- output ------------------------------------------------------------------- */

START_TEST(test_stdout_write_errors) {
    shell_result *r = sh("$FT --model llama3-8b --gpus 8 > /dev/full");
    ck_assert_int_eq(r->status, 2);
    ck_assert_ptr_nonnull(strstr(r->err, "cannot write"));
    r = sh("$FT check %s > /dev/full", repo("calibrate/records/ftrain-cpu.jsonl"));
    ck_assert_int_eq(r->status, 2);
    r = sh("$FT --help > /dev/full");
    ck_assert_int_eq(r->status, 2);
    r = sh("$FR --help > /dev/full");
    ck_assert_int_eq(r->status, 2);
}
END_TEST

/* Options a command would ignore are refused by name. */
START_TEST(test_unused_options_refused) {
    const char *cases[][2] = {
        {"timeline --model llama3-8b --csv t.csv", "--csv"},
        {"timeline --model llama3-8b --records nothere.jsonl", "--records"},
        {"--model llama3-8b --svg x.svg", "--svg"},
        {"--model llama3-8b --out d", "--out"},
        {"--model llama3-8b --catalog c.json", "--catalog"},
        {"sweep --model llama3-8b --seq 512:1024:512 --out d", "--out"},
        {"plan --model llama3-8b --tokens 1B --csv p.csv", "--csv"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        shell_result *r = sh("$FT %s", cases[i][0]);
        ck_assert_msg(r->status == 2, "%s: exit %d", cases[i][0], r->status);
        ck_assert_msg(strstr(r->err, cases[i][1]) && strstr(r->err, "does nothing"), "%s: %s", cases[i][0],
                      r->err);
    }
    ck_assert(!exists("t.csv") && !exists("x.svg") && !exists("d"));
}
END_TEST

/* A full disk (file-size limit, SIGXFSZ ignored) while replacing CSV/SVG
 * outputs: exit 2, the old files untouched, no temporary left. */
START_TEST(test_outputs_survive_full_disk) {
    shell_result *r = sh("echo old > s.csv; echo old > s.svg; echo old > t.svg; trap \"\" XFSZ; ulimit -f 1; "
                         "$FT sweep --model llama3-8b --gpus 8 --seq 256:8192:256 --csv s.csv >/dev/null; a=$?; "
                         "$FT sweep --model llama3-8b --gpus 8 --seq 256:8192:256 --svg s.svg >/dev/null; b=$?; "
                         "$FT timeline --model llama3-8b --gpus 8 --svg t.svg >/dev/null; c=$?; echo $a $b $c; "
                         "cat s.csv s.svg t.svg; ls -A | grep -c \"^\\.[st]\\.\" ; exit 0");
    ck_assert_int_eq(r->status, 0);
    ck_assert_msg(strstr(r->out, "2 2 2\nold\nold\nold\n0\n") != NULL, "got: %s / %s", r->out, r->err);
    /* Without the limit they are written (and replace the old). */
    r = sh("$FT timeline --model llama3-8b --gpus 8 --svg t.svg >/dev/null && head -c 5 t.svg");
    ck_assert_int_eq(r->status, 0);
    ck_assert_str_eq(r->out, "<?xml");
}
END_TEST

/* Issue 20, item 13: outputs as a user's shell meets them. A file-size limit
 * without `trap "" XFSZ` (before: SIGXFSZ killed ftest and left its temporary
 * file); --csv and --svg naming one file (before: one silently overwrote the
 * other); `timeline --svg F | head` (before: SIGPIPE at the text, no chart);
 * `sweep --csv -` (before: the human table came first, so the CSV did not
 * parse). */
START_TEST(test_outputs_round2) {
    shell_result *r = sh("echo old > s.csv; ulimit -f 1; $FT sweep --model llama3-8b --gpus 8 --seq 256:8192:256 "
                         "--csv s.csv >/dev/null; echo $?; cat s.csv; ls -A | grep -c \"^\\.s\\.\"; exit 0");
    ck_assert_msg(!strcmp(r->out, "2\nold\n0\n"), "got: %s / %s", r->out, r->err);
    const char *same[] = {"--csv x --svg x", "--csv x --svg ./x", "--csv d/../x --svg x"};
    for (int i = 0; i < 3; i++) {
        r = sh("mkdir -p d; $FT sweep --model llama3-8b --seq 512:1024:512 %s", same[i]);
        ck_assert_msg(r->status == 2 && strstr(r->err, "overwrite"), "%s: exit %d: %s", same[i], r->status, r->err);
        ck_assert(!exists("x"));
    }
    r = sh("$FT sweep --model llama3-8b --seq 512:1024:512 --csv - --json");
    ck_assert_int_eq(r->status, 2);
    r = sh("$FT timeline --model llama3-8b --gpus 8 --svg t.svg | head -1 > /dev/null; tail -c 7 t.svg");
    ck_assert_msg(!strcmp(r->out, "</svg>\n"), "the chart was not written whole: %s", r->out);
    r = sh("$FT sweep --model llama3-8b --gpus 8 --seq 512:2048:512 --csv -");
    ck_assert_int_eq(r->status, 0);
    int lines = 0;
    for (char *line = strtok(r->out, "\n"); line; line = strtok(NULL, "\n"), lines++)
        ck_assert_msg(lines == 0 ? !strncmp(line, "seq,", 4) : (line[0] >= '0' && line[0] <= '9'),
                      "line %d is not CSV: %s", lines + 1, line);
    ck_assert_int_eq(lines, 5);
}
END_TEST

/* fit: the output folder is explicit, the set is committed whole, and
 * writing nothing is an error rather than "profiles written". */
START_TEST(test_fit_never_silent) {
    /* 67 DeepSpeed records: a fit of seconds even under the sanitizers */
    const char *gpjt = repo("calibrate/records/gpjt-llama3-8b-a100x8.jsonl");
    shell_result *r = sh("$FT fit %s", gpjt);
    ck_assert_int_eq(r->status, 2);
    ck_assert_ptr_nonnull(strstr(r->err, "--out"));
    r = sh("$FT fit --out p %s", repo("calibrate/records/ftrain-cpu.jsonl"));
    ck_assert_int_eq(r->status, 2);
    ck_assert_ptr_nonnull(strstr(r->err, "nothing written"));
    ck_assert(!exists("p"));
    /* A stale profile of an older fit goes with the old set. */
    r = sh("mkdir p && cp %s p/fsdp.json && $FT fit --out p %s > /dev/null && ls p",
           repo("calibrate/profiles/deepspeed.json"), gpjt);
    ck_assert_msg(r->status == 0, "exit %d: %s", r->status, r->err);
    ck_assert_str_eq(r->out, "deepspeed.json\n");
}
END_TEST

/* Issue 20, items 1 and 2: fit --out never takes a user's files. A link to a
 * folder is refused (before: the link was replaced by the new set and the
 * linked folder's files deleted through it, exit 0); so is a folder of *.json
 * files that are not profiles, such as a copy of models/ (before: every file
 * replaced by the profile set, exit 0). Both are left byte for byte. */
START_TEST(test_fit_out_never_takes_user_files) {
    const char *gpjt = repo("calibrate/records/gpjt-llama3-8b-a100x8.jsonl");
    shell_result *r = sh("mkdir mine && cp %s/llama3-8b.json %s/qwen1.5-0.5b.json mine/ && ln -s mine link && "
                         "cp -r %s models && ls -l mine models > before && "
                         "md5sum mine/* models/* > sums", repo("models"), repo("models"), repo("models"));
    ck_assert_int_eq(r->status, 0);
    const char *outs[] = {"link", "link/", "mine", "models"};
    for (int i = 0; i < 4; i++) {
        r = sh("$FT fit --out %s %s", outs[i], gpjt);
        ck_assert_msg(r->status == 2, "--out %s: exit %d: %s", outs[i], r->status, r->out);
        ck_assert_msg(strstr(r->err, i < 2 ? "symbolic link" : "not a profile"), "--out %s: %s", outs[i], r->err);
    }
    r = sh("test -L link && md5sum -c --quiet sums && ls -l mine models | cmp -s - before && "
           "[ $(ls -A | grep -c new-) = 0 ]");
    ck_assert_msg(r->status == 0, "the user's files changed: %s%s", r->out, r->err);
}
END_TEST

/* Where the numbers come from: the data folder and the profiles in force are
 * named (text and JSON), and a profile that is there but cannot be loaded is
 * an error unless --no-profile (before, the defaults were used silently and
 * the main job's device figure moved from 35.77 to 33.30 GiB unannounced). */
START_TEST(test_numbers_name_their_source) {
    shell_result *r = sh("$FT --model llama3-8b --gpus 8");
    ck_assert_int_eq(r->status, 0);
    ck_assert_ptr_nonnull(strstr(r->out, "data: shipped; profiles: calibrate/profiles/pytorch.json, deepspeed.json"));
    r = sh("$FT --model llama3-8b --gpus 8 --json");
    cJSON *j = cJSON_Parse(r->out);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "data_origin")->valuestring, "shipped");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "profiles")->valuestring,
                     "calibrate/profiles/pytorch.json, deepspeed.json"); /* the common one first */
    cJSON_Delete(j);
    /* A data folder of our own whose deepspeed profile is not a readable file. */
    r = sh("mkdir -p d/calibrate/profiles/deepspeed.json && ln -s %s d/models && "
           "FTEST_DATA_DIR=d $FT --model llama3-8b --gpus 8", repo("models"));
    ck_assert_msg(r->status == 2, "exit %d: %s", r->status, r->out);
    ck_assert_ptr_nonnull(strstr(r->err, "deepspeed.json"));
    ck_assert_ptr_nonnull(strstr(r->err, "--no-profile"));
    r = sh("FTEST_DATA_DIR=d $FT --model llama3-8b --gpus 8 --no-profile");
    ck_assert_int_eq(r->status, 0);
    ck_assert_ptr_nonnull(strstr(r->out, "data: FTEST_DATA_DIR=d; profiles: none (--no-profile)"));
}
END_TEST

Suite *suite_reliability_cli(void);
Suite *suite_reliability_cli(void) {
    Suite *s = suite_create("reliability_cli");
    const struct {
        const char *name;
        const TTest *test;
    } cases[] = {
        {"ftrain_windows", test_ftrain_window_records},
        {"ftrain_kill", test_ftrain_killed_keeps_windows},
        {"ftrain_up_front", test_ftrain_refuses_up_front},
        {"ftrain_repair", test_ftrain_repairs_cut_file},
        {"ftrain_nan", test_ftrain_stops_at_nan},
        {"ftrain_last_data", test_ftrain_last_data_wins},
        {"ftrain_relative_model", test_ftrain_relative_model_checks_anywhere},
        {"check_input", test_check_empty_blank_nul},
        {"check_model_path", test_check_model_path_confined},
        {"stdout", test_stdout_write_errors},
        {"unused_options", test_unused_options_refused},
        {"outputs_full_disk", test_outputs_survive_full_disk},
        {"outputs_round2", test_outputs_round2},
        {"fit", test_fit_never_silent},
        {"fit_user_files", test_fit_out_never_takes_user_files},
        {"sources", test_numbers_name_their_source},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
    return s;
}
