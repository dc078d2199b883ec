/* ftrain's command line: the parser in process (every flag, strict numbers,
 * contradictions) and the binary's contract: bad input gets one line on stderr
 * and exit status 2, never a crash; a good run exits 0 and appends a record. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>

#include "backend.h"
#include "cli.h"
#include "data.h"
#include "json_util.h"
#include "test_util.h"
#include "trainer_util.h"

static int parse(const char *line, tr_config *c, char *err, size_t errlen) {
    char buf[1024], *argv[64];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    argv[argc++] = "ftrain";
    for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    bool help;
    return tr_cli_parse(argc, argv, c, &help, err, errlen);
}

static void bad(const char *line, const char *word) {
    static tr_config c;
    char err[512] = "";
    ck_assert_msg(parse(line, &c, err, sizeof err) != 0, "accepted: %s", line);
    ck_assert_msg(strstr(err, word) != NULL, "%s: message \"%s\" lacks \"%s\"", line, err, word);
    ck_assert_msg(!strchr(err, '\n'), "%s: message has several lines", line);
}

START_TEST(test_parse_good) {
    static tr_config c;
    char err[512];
    ck_assert_msg(parse("--model tiny-qwen2 --layers 1 --seq 16 --batch=3 --grad-accum 2 --steps 5 --ranks 3 "
                        "--zero 3 --offload optimizer+params --checkpointing selective --attention eager "
                        "--loss chunked --precision bf16-mixed --optimizer sgd --lr 0.5 --warmup 2 "
                        "--weight-decay 0.1 --clip 0 --seed 42 --threads 2 --quiet --record /tmp/x.jsonl",
                        &c, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(c.model.name, "tiny-qwen2");
    ck_assert_str_eq(c.device, "cpu");
    static tr_config d;
    ck_assert_msg(parse("--device cuda", &d, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(d.device, "cuda");
    ck_assert_str_eq(c.model_arg, "tiny-qwen2");
    ck_assert_int_eq(c.layers, 1);
    ck_assert_int_eq(c.seq_len, 16);
    ck_assert_int_eq(c.micro_batch, 3);
    ck_assert_int_eq(c.grad_accum, 2);
    ck_assert_int_eq(c.steps, 5);
    ck_assert_int_eq(c.ranks, 3);
    ck_assert_int_eq(c.zero_stage, 3);
    ck_assert_int_eq(c.offload, FT_OFFLOAD_OPTIMIZER_PARAMS);
    ck_assert_int_eq(c.checkpointing, FT_CKPT_SELECTIVE);
    ck_assert_int_eq(c.attention, FT_ATTN_EAGER);
    ck_assert_int_eq(c.loss, FT_LOSS_CHUNKED);
    ck_assert_int_eq(c.precision, FT_PREC_BF16_MIXED);
    ck_assert_int_eq(c.optimizer, FT_OPT_SGD);
    ck_assert_close(c.lr, 0.5, 0, 0);
    ck_assert_int_eq(c.warmup, 2);
    ck_assert_close(c.weight_decay, 0.1, 0, 0);
    ck_assert_close(c.clip, 0, 0, 0);
    ck_assert_uint_eq(c.seed, 42);
    ck_assert_int_eq(c.threads, 2);
    ck_assert(c.quiet);
    ck_assert_str_eq(c.record_path, "/tmp/x.jsonl");
    /* Defaults: the whole model, synthetic data, seeded weights. */
    ck_assert(parse("", &c, err, sizeof err) == 0);
    ck_assert_str_eq(c.model.name, "tiny-llama");
    ck_assert_int_eq(c.layers, 2);
    ck_assert_str_eq(c.data_path, "");
    ck_assert_str_eq(c.init_path, "");
    ck_assert(parse("--data synthetic --init seeded", &c, err, sizeof err) == 0);
    ck_assert_str_eq(c.data_path, "");
    /* --global-batch sets the accumulation: 12 / (2 ranks x 3) = 2. */
    ck_assert(parse("--ranks 2 --batch 3 --global-batch 12", &c, err, sizeof err) == 0);
    ck_assert_int_eq(c.grad_accum, 2);
    /* A config.json by path. */
    ck_assert_msg(parse("--model models/tiny-llama-bias.json", &c, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.model.num_layers, 3);
}
END_TEST

START_TEST(test_parse_bad) {
    bad("--model no-such-model", "unknown model");
    bad("--model /nonexistent/config.json", "cannot open");
    bad("--seq 129", "above the model's maximum of 128");
    bad("--seq 0", "--seq");
    bad("--batch 0", "--batch");
    bad("--batch -2", "--batch");
    bad("--batch abc", "expects an integer");
    bad("--batch 2x", "expects an integer");
    bad("--batch 99999999999999999999", "expects an integer");
    bad("--lr fast", "expects a number");
    bad("--device tpu", "--device must be cpu or cuda");
    bad("--device", "expects a value");
    bad("--lr nan", "expects a number");
    bad("--lr -1", "--lr");
    bad("--steps 0", "--steps");
    bad("--ranks 0", "--ranks");
    bad("--ranks 65", "--ranks");
    bad("--ranks 4 --batch 3 --global-batch 16", "not divisible by ranks x batch");
    bad("--zero 4", "--zero");
    bad("--zero 2 --offload optimizer+params", "needs --zero 3");
    bad("--offload optimizer", "needs --zero 1, 2 or 3");
    bad("--offload disk", "--offload");
    bad("--attention sdpa", "eager and flash");
    bad("--attention fast", "--attention");
    /* Values of the shared vocabulary (common/run_vocab.h) ftrain does not
     * implement: refused as such, with the values it has; other strings as
     * unknown, listing only those. */
    bad("--precision fp16-mixed", "--precision fp16-mixed is not implemented by ftrain (it has fp32|bf16-mixed)");
    bad("--precision bf16", "not implemented by ftrain");
    bad("--optimizer lion", "--optimizer lion is not implemented by ftrain (it has adamw|sgd)");
    bad("--precision fp8", "--precision must be one of fp32|bf16-mixed (got \"fp8\")");
    bad("--checkpointing some", "--checkpointing");
    bad("--loss fused", "--loss");
    bad("--optimizer adam", "--optimizer");
    bad("--layers 3", "--layers 3 is outside 1..2");
    bad("--layers 0", "--layers");
    bad("--seed -1", "--seed");
    bad("--warmup -1", "--warmup");
    bad("--clip -1", "--clip");
    bad("--weight-decay 2", "--weight-decay");
    bad("--threads 5000", "--threads");
    bad("--frobnicate 1", "unknown option");
    bad("--batch", "expects a value");
    bad("stray", "unexpected argument");
    bad("--data ", "expects a value");
}
END_TEST

/* A configuration filled in code, not by the flags, meets the same refusal. */
START_TEST(test_validate_refuses_unimplemented) {
    tr_config c = test_tr_config("tiny-llama");
    char err[256];
    ck_assert(tr_config_validate(&c, err, sizeof err) == 0);
    c.attention = FT_ATTN_SDPA;
    ck_assert(tr_config_validate(&c, err, sizeof err) != 0);
    ck_assert_str_eq(err, "--attention sdpa is not implemented by ftrain");
    c = test_tr_config("tiny-llama");
    c.optimizer = FT_OPT_ADAFACTOR;
    ck_assert(tr_config_validate(&c, err, sizeof err) != 0);
    ck_assert_str_eq(err, "--optimizer adafactor is not implemented by ftrain");
}
END_TEST

START_TEST(test_help_documents_every_flag) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    tr_cli_usage(f);
    fclose(f);
    const char *flags[] = {"--model", "--layers", "--seq", "--batch", "--grad-accum", "--global-batch",
                           "--steps", "--ranks", "--zero", "--offload", "--checkpointing", "--attention",
                           "--loss", "--precision", "--optimizer", "--lr", "--warmup", "--weight-decay",
                           "--clip", "--seed", "--data", "--init", "--record", "--threads", "--device", "--quiet", "--help"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        ck_assert_msg(strstr(text, flags[i]) != NULL, "--help does not mention %s", flags[i]);
    free(text);
}
END_TEST

/* ---- the binary ---- */
static const char *ftrain_bin(void) {
    static char path[1200];
    snprintf(path, sizeof path, "%s/ftrain", test_build_dir());
    return path;
}

/* Runs ftrain with args; returns the exit status and stderr's text. */
static int run(const char *args, char *errbuf, size_t n) {
    char errfile[] = "/tmp/ftrain_err_XXXXXX";
    int fd = mkstemp(errfile);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s >/dev/null 2>%s", ftrain_bin(), args, errfile);
    int st = system(cmd);
    ck_assert_msg(st != -1 && WIFEXITED(st), "%s did not exit normally", cmd);
    FILE *f = fopen(errfile, "r");
    size_t got = fread(errbuf, 1, n - 1, f);
    errbuf[got] = '\0';
    fclose(f);
    unlink(errfile);
    return WEXITSTATUS(st);
}

static void bin_bad(const char *args, const char *word) {
    char err[4096];
    int st = run(args, err, sizeof err);
    ck_assert_msg(st == 2, "ftrain %s: exit %d (want 2), stderr: %s", args, st, err);
    ck_assert_msg(!strncmp(err, "ftrain: ", 8), "ftrain %s: stderr \"%s\"", args, err);
    char *nl = strchr(err, '\n');
    ck_assert_msg(nl && nl[1] == '\0', "ftrain %s: want exactly one line, got \"%s\"", args, err);
    ck_assert_msg(strstr(err, word) != NULL, "ftrain %s: \"%s\" lacks \"%s\"", args, err, word);
}

START_TEST(test_binary_bad_input) {
    ck_assert_msg(access(ftrain_bin(), X_OK) == 0, "%s is not built (make test builds it)", ftrain_bin());
    bin_bad("--model llama-9000", "unknown model");
    bin_bad("--seq 4096", "maximum");
    bin_bad("--batch 0", "--batch");
    bin_bad("--ranks 3 --batch 2 --global-batch 8", "not divisible");
    bin_bad("--data /nonexistent/tokens.bin", "cannot open data file");
    bin_bad("--steps ten", "expects an integer");
    /* No GPU on the development and CI machines: --device cuda is refused in
     * one line, whether this build has the CUDA backend or not. */
    const tr_backend *cu = tr_backend_cuda();
    char perr[256];
    if (!cu) bin_bad("--device cuda --steps 1", "built without CUDA");
    else if (cu->probe(perr, sizeof perr)) bin_bad("--device cuda --steps 1", "no CUDA device");
    bin_bad("--record /nonexistent/dir/r.jsonl --steps 1", "record file");
    /* A truncated safetensors file. */
    char st[] = "/tmp/ftrain_trunc_XXXXXX";
    int fd = mkstemp(st);
    ck_assert_int_ge(fd, 0);
    const unsigned char head[] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '"', 'a', '"', ':'};
    ck_assert_int_eq(write(fd, head, sizeof head), (int)sizeof head);
    close(fd);
    char args[256];
    snprintf(args, sizeof args, "--init %s", st);
    bin_bad(args, "truncated");
    /* A token file with a token beyond the vocabulary. */
    int32_t tok[40];
    for (int i = 0; i < 40; i++) tok[i] = i == 30 ? 64 : i % 8;
    char err[256];
    ck_assert(tr_data_write(st, tok, 40, 2, err, sizeof err) == 0);
    snprintf(args, sizeof args, "--seq 8 --data %s", st);
    bin_bad(args, "vocabulary");
    unlink(st);
}
END_TEST

START_TEST(test_binary_good_run) {
    ck_assert_msg(access(ftrain_bin(), X_OK) == 0, "%s is not built (make test builds it)", ftrain_bin());
    char err[8192];
    ck_assert_int_eq(run("--help", err, sizeof err), 0);
    char rec[] = "/tmp/ftrain_rec_XXXXXX";
    int fd = mkstemp(rec);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char args[512];
    snprintf(args, sizeof args, "--model tiny-qwen2 --steps 3 --ranks 2 --zero 2 --record %s", rec);
    ck_assert_int_eq(run(args, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "step 3/3") != NULL, "no per-step progress on stderr: %s", err);
    ck_assert_int_eq(run(args, err, sizeof err), 0); /* appends */
    size_t len;
    char *text = ft_read_file(rec, 1 << 20, &len, err, sizeof err);
    ck_assert_ptr_nonnull(text);
    char *second = strchr(text, '\n');
    ck_assert_ptr_nonnull(second);
    *second++ = '\0';
    ck_assert_ptr_nonnull(strchr(second, '\n'));
    cJSON *r = cJSON_Parse(text);
    ck_assert_ptr_nonnull(r);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "measured");
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(m, "ranks");
    ck_assert_int_eq(cJSON_GetArraySize(ranks), 2);
    ck_assert(cJSON_GetObjectItemCaseSensitive(m, "tokens_per_s")->valuedouble > 0);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "hardware"), "gpu")->valuestring,
                     "cpu");
    cJSON_Delete(r);
    free(text);
    /* A run larger than this machine is an out-of-memory measurement: exit 1
     * and a record with "oom": true, written without allocating the slabs. */
    FILE *f = fopen(rec, "w");
    fclose(f);
    snprintf(args, sizeof args, "--model llama3-8b --seq 8192 --batch 64 --steps 1 --record %s", rec);
    ck_assert_int_eq(run(args, err, sizeof err), 1);
    ck_assert_msg(strstr(err, "out of memory") != NULL, "%s", err);
    text = ft_read_file(rec, 1 << 20, &len, err, sizeof err);
    ck_assert_ptr_nonnull(text);
    r = cJSON_Parse(text);
    ck_assert_ptr_nonnull(r);
    m = cJSON_GetObjectItemCaseSensitive(r, "measured");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "oom")));
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(m, "ranks"));
    cJSON_Delete(r);
    free(text);
    unlink(rec);
}
END_TEST

Suite *suite_trainer_cli(void); /* registered by the Makefile */
Suite *suite_trainer_cli(void) {
    Suite *s = suite_create("trainer_cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_parse_good);
    tcase_add_test(tc, test_parse_bad);
    tcase_add_test(tc, test_validate_refuses_unimplemented);
    tcase_add_test(tc, test_help_documents_every_flag);
    tcase_add_test(tc, test_binary_bad_input);
    tcase_add_test(tc, test_binary_good_run);
    suite_add_tcase(s, tc);
    return s;
}
