/* --axolotl: axolotl's training YAML read with libyaml (estimator/frameworks/yaml_json.c,
 * axolotl.c). The fixture has the shape of axolotl's examples/llama-3/qlora.yml. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_run.h"
#include "estimate.h"
#include "lora.h"
#include "test_util.h"
#include "yaml_json.h"

static char tmp_path[64];
static const char *write_yaml(const char *text) {
    snprintf(tmp_path, sizeof tmp_path, "/tmp/ftest-axolotl-XXXXXX");
    int fd = mkstemp(tmp_path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return tmp_path;
}

START_TEST(test_qlora_example) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s", test_repo_path("tests/fixtures/axolotl_llama3_qlora.yml"));
    est_run run;
    char *argv[] = {"ftest", "--axolotl", path, NULL};
    ck_assert_msg(test_cli_build(3, argv, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(run.model.name, "llama3-8b"); /* base_model meta-llama/Meta-Llama-3-8B */
    ck_assert_int_eq(run.lora.rank, 32);
    ck_assert(run.lora.alpha == 16);
    ck_assert(run.lora.dropout == 0.05);
    ck_assert_uint_eq(run.lora.targets, EST_LORA_ALL_LINEAR); /* lora_target_linear: true */
    ck_assert_int_eq(run.quant, EST_QUANT_NF4);
    ck_assert_int_eq(run.seq_len, 4096);
    ck_assert_int_eq(run.micro_batch, 2);
    ck_assert_int_eq(run.grad_accum, 4);
    ck_assert_int_eq(run.optimizer, EST_OPT_PAGED_ADAMW_32BIT);
    ck_assert_int_eq(run.checkpointing, EST_CKPT_FULL);
    ck_assert_int_eq(run.attention, EST_ATTN_FLASH);
    ck_assert_int_eq(run.precision, EST_PREC_BF16_MIXED); /* bf16: auto with an adapter */
    ck_assert_int_eq(run.framework, EST_FW_HF);
    ck_assert_ptr_nonnull(strstr(run.settings_from, "sequence_len"));

    /* Flags win, and the output no longer credits the file for them. */
    est_run flagged;
    char *argv2[] = {"ftest", "--axolotl", path, "--seq", "1024", "--lora-rank", "8", NULL};
    ck_assert_msg(test_cli_build(7, argv2, &flagged, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(flagged.seq_len, 1024);
    ck_assert_int_eq(flagged.lora.rank, 8);
    ck_assert_ptr_null(strstr(flagged.settings_from, "sequence_len"));

    /* The same settings as flags give the same estimate. */
    est_run same;
    char *argv3[] = {"ftest", "--model", "llama3-8b", "--lora-rank", "32", "--lora-alpha", "16",
                     "--lora-dropout", "0.05", "--lora-targets", "all-linear", "--quant", "nf4",
                     "--seq", "4096", "--batch", "2", "--grad-accum", "4", "--optimizer",
                     "paged-adamw-32bit", "--checkpointing", "full", "--attention", "flash", NULL};
    ck_assert_msg(test_cli_build(25, argv3, &same, err, sizeof err) == 0, "%s", err);
    est_estimate a, b;
    est_estimate_init(&a);
    est_estimate_init(&b);
    ck_assert_msg(est_estimate_run(&run, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(est_estimate_run(&same, &b, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.peak_allocated_bytes, b.peak_allocated_bytes);
    ck_assert_int_eq(a.cpu_bytes, b.cpu_bytes);
    est_estimate_free(&a);
    est_estimate_free(&b);
}
END_TEST

/* FSDP and DeepSpeed from the file; a DeepSpeed path beside the YAML. */
START_TEST(test_fsdp_and_deepspeed) {
    char err[256];
    est_run run;
    const char *p = write_yaml("base_model: meta-llama/Llama-2-70b-hf\nadapter: qlora\nload_in_4bit: true\n"
                               "lora_r: 16\nlora_target_modules: [q_proj, v_proj]\nbf16: true\n"
                               "fsdp:\n  - full_shard\n  - auto_wrap\nfsdp_config:\n"
                               "  fsdp_offload_params: false\n");
    char *argv[] = {"ftest", "--axolotl", (char *)p, "--gpus", "2", NULL};
    ck_assert_msg(test_cli_build(5, argv, &run, err, sizeof err) == 0, "%s", err);
    unlink(p);
    ck_assert_str_eq(run.model.name, "llama2-70b");
    ck_assert_int_eq(run.framework, EST_FW_FSDP);
    ck_assert_int_eq(run.zero_stage, 3);
    ck_assert_uint_eq(run.lora.targets, EST_LORA_DEFAULT_TARGETS);

    FILE *f = fopen("/tmp/ftest-axolotl-ds.json", "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"zero_optimization\": {\"stage\": 2}, \"bf16\": {\"enabled\": \"auto\"},"
          " \"train_micro_batch_size_per_gpu\": \"auto\"}", f);
    fclose(f);
    p = write_yaml("base_model: meta-llama/Meta-Llama-3-8B\nbf16: true\nmicro_batch_size: 4\n"
                   "deepspeed: ftest-axolotl-ds.json\n");
    char *argv2[] = {"ftest", "--axolotl", (char *)p, "--gpus", "8", NULL};
    ck_assert_msg(test_cli_build(5, argv2, &run, err, sizeof err) == 0, "%s", err);
    unlink(p);
    unlink("/tmp/ftest-axolotl-ds.json");
    ck_assert_int_eq(run.framework, EST_FW_DEEPSPEED);
    ck_assert_int_eq(run.zero_stage, 2);
    ck_assert_int_eq(run.micro_batch, 4);          /* "auto": the YAML's micro_batch_size */
    ck_assert_int_eq(run.precision, EST_PREC_BF16); /* full fine-tune in bf16 weights */
}
END_TEST

START_TEST(test_yaml_scalars) {
    char err[256];
    const char *y = "a: 3\nb: 0.05\nc: true\nd: ~\ne: \"3\"\nf: 1e-4\ng: 0x10\nh: [1, two]\n";
    cJSON *r = est_yaml_parse(y, strlen(y), "t", err, sizeof err);
    ck_assert_ptr_nonnull(r);
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(r, "a")));
    ck_assert(cJSON_GetObjectItem(r, "b")->valuedouble == 0.05);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "c")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(r, "d")));
    ck_assert(cJSON_IsString(cJSON_GetObjectItem(r, "e"))); /* quoted: a string */
    ck_assert(cJSON_GetObjectItem(r, "f")->valuedouble == 1e-4);
    ck_assert(cJSON_IsString(cJSON_GetObjectItem(r, "g")));
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r, "h")), 2);
    cJSON_Delete(r);
}
END_TEST

/* Bad files: one line, no crash. */
START_TEST(test_bad_yaml) {
    const char *bad[][2] = {
        {"a: &x [1, 2]\nb: *x\n", "aliases"},
        {"a: [1, 2\n", "line"},
        {"- just\n- a list\n", "mapping"},
        {"a: 1\n---\nb: 2\n", "more than one"},
        {"{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{: 1}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}\n", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        cJSON *r = est_yaml_parse(bad[i][0], strlen(bad[i][0]), "t", err, sizeof err);
        ck_assert_msg(r == NULL, "accepted case %zu", i);
        ck_assert_msg(err[0] && !strchr(err, '\n'), "case %zu: \"%s\"", i, err);
        if (bad[i][1]) ck_assert_msg(strstr(err, bad[i][1]), "case %zu: \"%s\"", i, err);
    }
    const char *cases[][2] = {
        {"base_model: nobody/none\n", "base_model"},
        {"base_model: meta-llama/Meta-Llama-3-8B\noptimizer: adamw_anyprecision\n", "optimizer"},
        {"base_model: meta-llama/Meta-Llama-3-8B\nadapter: qlora\n", "load_in_4bit"},
        {"base_model: meta-llama/Meta-Llama-3-8B\nadapter: lora\nlora_r: 0\n", "lora_r"},
        {"base_model: meta-llama/Meta-Llama-3-8B\nload_in_4bit: true\n", "adapter"},
        {"base_model: meta-llama/Meta-Llama-3-8B\nfp16: true\n", "fp16"},
        {"base_model: meta-llama/Meta-Llama-3-8B\nfsdp: [auto_wrap]\n", "sharding"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        est_run run;
        const char *p = write_yaml(cases[i][0]);
        char *argv[] = {"ftest", "--axolotl", (char *)p, NULL};
        int rc = test_cli_build(3, argv, &run, err, sizeof err);
        unlink(p);
        ck_assert_msg(rc == -1, "accepted case %zu", i);
        ck_assert_msg(strstr(err, cases[i][1]) && !strchr(err, '\n'), "case %zu: \"%s\"", i, err);
    }
}
END_TEST

Suite *suite_axolotl(void);
Suite *suite_axolotl(void) {
    Suite *s = suite_create("axolotl");
    TCase *tc = tcase_create("axolotl");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_qlora_example);
    tcase_add_test(tc, test_fsdp_and_deepspeed);
    tcase_add_test(tc, test_yaml_scalars);
    tcase_add_test(tc, test_bad_yaml);
    suite_add_tcase(s, tc);
    return s;
}
