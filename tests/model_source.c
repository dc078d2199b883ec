/* --model as a folder, a .safetensors file, an index, or ORG/NAME in the
 * Hugging Face cache (estimator/model/model_source.c, st_header.c): headers only. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_run.h"
#include "model_source.h"
#include "test_util.h"

/* Writes a safetensors file: header text, then `data` zero bytes. */
static void write_st(const char *path, const char *header, size_t data) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint64_t n = strlen(header);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, n, f);
    for (size_t i = 0; i < data; i++) fputc(0, f);
    fclose(f);
}

static void copy_file(const char *from, const char *to) {
    size_t len;
    char *text = test_slurp(from, &len);
    FILE *f = fopen(to, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(text, 1, len, f);
    fclose(f);
    free(text);
}

/* tiny-llama has 22,688 parameters: an F32 embedding (64 x 32 = 2048, 8192
 * bytes) and the rest as one BF16 tensor of 20,640 (41,280 bytes). */
static const char *TINY_HEADER =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[64,32],\"data_offsets\":[0,8192]},"
    "\"rest\":{\"dtype\":\"BF16\",\"shape\":[20640],\"data_offsets\":[8192,49472]}}";

static char dir[64];

static void make_folder(void) {
    snprintf(dir, sizeof dir, "/tmp/ftest-model-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char p[256];
    snprintf(p, sizeof p, "%s/config.json", dir);
    copy_file(test_repo_path("models/tiny-llama.json"), p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_st(p, TINY_HEADER, 49472);
}

static void remove_folder(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_folder_and_file) {
    make_folder();
    char err[256];
    est_model_source s;
    ck_assert_msg(est_model_source_resolve(dir, &s, err, sizeof err) == 0, "%s", err);
    ck_assert(s.have_weights);
    ck_assert_int_eq(s.weights.elements, 22688);
    ck_assert_int_eq(s.weights.tensors, 2);
    ck_assert_int_eq(s.weights.bytes, 49472);
    ck_assert_str_eq(s.weights.dtypes, "F32+BF16");
    char p[256];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    ck_assert_msg(est_model_source_resolve(p, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(s.weights.elements, 22688);

    /* Through the command line: the header count is compared with config.json's. */
    est_cli cli;
    char *argv[] = {"ftest", "--model", dir, "--framework", "hf", "--seq", "64", NULL};
    ck_assert_msg(est_cli_parse(7, argv, &cli, err, sizeof err) == 0, "%s", err);
    est_gpu_catalog cat;
    ck_assert(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0);
    est_run run;
    ck_assert_msg(est_cli_build_run(&cli, &cat, &run, err, sizeof err) == 0, "%s", err);
    est_gpu_catalog_free(&cat);
    ck_assert_ptr_nonnull(strstr(run.weights_note, "22688 parameters in 2 tensors"));
    ck_assert_ptr_nonnull(strstr(run.weights_note, "equal to config.json"));

    /* An index naming two shards. */
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    write_st(p, "{\"a\":{\"dtype\":\"F16\",\"shape\":[10,10],\"data_offsets\":[0,200]}}", 200);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    write_st(p, "{\"b\":{\"dtype\":\"I8\",\"shape\":[7],\"data_offsets\":[0,7]}}", 7);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"metadata\":{\"total_size\":207},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
          "\"b\":\"model-00002-of-00002.safetensors\"}}", f);
    fclose(f);
    ck_assert_msg(est_model_source_resolve(dir, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(s.weights.elements, 107); /* the index wins over model.safetensors */
    ck_assert_int_eq(s.weights.files, 2);
    /* A shard outside the folder is refused. */
    f = fopen(p, "w");
    fputs("{\"weight_map\":{\"a\":\"../etc/passwd\"}}", f);
    fclose(f);
    ck_assert_int_eq(est_model_source_resolve(dir, &s, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not a file beside the index"));
    remove_folder();
}
END_TEST

/* ORG/NAME from HF_HUB_CACHE: models--ORG--NAME/refs/main names the snapshot. */
START_TEST(test_hf_cache) {
    make_folder();
    char p[512], err[256];
    const char *commit = "0123456789abcdef0123456789abcdef01234567";
    snprintf(p, sizeof p, "mkdir -p '%s/hub/models--acme--tiny/refs' '%s/hub/models--acme--tiny/snapshots/%s'",
             dir, dir, commit);
    ck_assert_int_eq(system(p), 0);
    snprintf(p, sizeof p, "%s/hub/models--acme--tiny/refs/main", dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "%s", commit);
    fclose(f);
    char from[256], to[512];
    snprintf(from, sizeof from, "%s/config.json", dir);
    snprintf(to, sizeof to, "%s/hub/models--acme--tiny/snapshots/%s/config.json", dir, commit);
    copy_file(from, to);
    char hub[128];
    snprintf(hub, sizeof hub, "%s/hub", dir);
    setenv("HF_HUB_CACHE", hub, 1);
    est_model_source s;
    ck_assert_msg(est_model_source_resolve("acme/tiny", &s, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(strstr(s.config, commit));
    ck_assert(!s.have_weights);
    ck_assert_int_eq(est_model_source_resolve("acme/absent", &s, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "huggingface-cli download acme/absent config.json"));
    unsetenv("HF_HUB_CACHE");
    remove_folder();
}
END_TEST

/* Headers are untrusted: every field checked against the file. */
START_TEST(test_bad_headers) {
    const char *bad[] = {
        "[]",
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,9]}}",   /* 9 != 2 x 4 */
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,800]}}", /* past the data */
        "{\"t\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}}",
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[1125899906842624,1125899906842624],\"data_offsets\":[0,8]}}",
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}",
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        est_st_summary acc;
        memset(&acc, 0, sizeof acc);
        char err[256] = "";
        ck_assert_msg(est_st_header_parse(bad[i], strlen(bad[i]), 100, &acc, err, sizeof err) == -1,
                      "accepted case %zu", i);
        ck_assert_msg(err[0] && !strchr(err, '\n'), "case %zu", i);
    }
    /* A header length beyond the file. */
    char path[] = "/tmp/ftest-st-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unsigned char len[8] = {0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0};
    ck_assert_int_eq(write(fd, len, 8), 8);
    close(fd);
    est_st_summary acc;
    memset(&acc, 0, sizeof acc);
    char err[256];
    ck_assert_int_eq(est_st_scan_file(path, &acc, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "does not fit"));
    unlink(path);
}
END_TEST

Suite *suite_model_source(void);
Suite *suite_model_source(void) {
    Suite *s = suite_create("model_source");
    TCase *tc = tcase_create("model_source");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_folder_and_file);
    tcase_add_test(tc, test_hf_cache);
    tcase_add_test(tc, test_bad_headers);
    suite_add_tcase(s, tc);
    return s;
}
