/* LoRA (estimator/model/lora.c and the frozen-block branch of hf_modeling.c) against
 * hand derivations written here from PEFT 0.13 tuners/lora/layer.py and the
 * transformers 4.40 Llama forward (docs/method.md, "LoRA"). */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "estimate.h"
#include "hf_modeling.h"
#include "lora.h"
#include "options.h"
#include "record.h"
#include "test_util.h"

static ft_model load_model(const char *name) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load(name, &m, err, sizeof err) == 0, "%s", err);
    return m;
}

static est_gpu h100(void) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    const est_gpu *g = est_gpu_find(&cat, "h100-80gb");
    ck_assert_ptr_nonnull(g);
    est_gpu out = *g;
    est_gpu_catalog_free(&cat);
    return out;
}

static est_run lora_run(const char *model, int64_t rank, uint32_t targets) {
    est_run run;
    ft_model m = load_model(model);
    est_gpu g = h100();
    est_run_defaults(&run, &m, &g);
    run.framework = EST_FW_HF;
    run.lora.rank = rank;
    run.lora.targets = targets;
    return run;
}

/* Llama-3-8B (h 4096, 8 KV heads x 128 = 1024, intermediate 14336, 32 layers):
 *   q,v r=16: 16*(4096+4096) + 16*(4096+1024) = 212,992 per layer, x32 =
 *   6,815,744 (the figure PEFT's print_trainable_parameters gives);
 *   all-linear r=16: 16*(8192 + 2*5120 + 8192 + 2*18432 + 18432) = 1,310,720
 *   per layer, x32 = 41,943,040. */
START_TEST(test_adapter_params_llama3_8b) {
    est_run run = lora_run("llama3-8b", 16, EST_LORA_DEFAULT_TARGETS);
    ck_assert_int_eq(est_lora_block_params(&run), 212992);
    ck_assert_int_eq(est_lora_params(&run), 6815744);
    ck_assert_int_eq(est_trainable_params(&run), 6815744);
    run.lora.targets = EST_LORA_ALL_LINEAR;
    ck_assert_int_eq(est_lora_params(&run), 41943040);
    run.lora.rank = 0; /* full fine-tuning trains the published 8,030,261,248 */
    ck_assert_int_eq(est_trainable_params(&run), 8030261248);
}
END_TEST

START_TEST(test_targets_parse) {
    uint32_t t;
    char err[256], buf[64];
    ck_assert_int_eq(est_lora_targets_parse("q,v", &t, err, sizeof err), 0);
    ck_assert_uint_eq(t, EST_LORA_DEFAULT_TARGETS);
    ck_assert_int_eq(est_lora_targets_parse("q_proj,k_proj,down_proj", &t, err, sizeof err), 0);
    ck_assert_str_eq(est_lora_targets_name(t, buf, sizeof buf), "q,k,down");
    ck_assert_int_eq(est_lora_targets_parse("all-linear", &t, err, sizeof err), 0);
    ck_assert_str_eq(est_lora_targets_name(t, buf, sizeof buf), "all-linear");
    ck_assert_int_eq(est_lora_targets_parse("q,", &t, err, sizeof err), -1);
    ck_assert_int_eq(est_lora_targets_parse("lm_head", &t, err, sizeof err), -1);
    ck_assert_int_eq(est_lora_targets_parse("", &t, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "needs a value"));
}
END_TEST

/* One Llama-3-8B block under LoRA q,v r=16, bf16-mixed (autocast over a bf16
 * base), SDPA, one sequence of 2048 (T = 2048), per token:
 *   attention norm: fp32 input 4h + rsqrt 4 (its weight is frozen: no saved y)
 *   SDPA: q, k and v repeated to 32 heads, output: 4 x 4096 x 2       = 8h
 *   MLP norm: 4h + 4
 *   SwiGLU: gate, silu(gate), up in bf16 (down is frozen: no product)  = 6f
 *   adapters q, v: A saves its own bf16 cast of x (2h each)            = 4h
 *                  B saves A's output, 16 wide, bf16 (32 each)          = 64
 * = 20h + 6f + 72 per token; per layer RoPE cos+sin 2 x 2048 x 128 x 2
 * and the fp32 log-sum-exp 32 heads x 2048 rows x 4. */
START_TEST(test_block_saved_lora_qv) {
    est_run run = lora_run("llama3-8b", 16, EST_LORA_DEFAULT_TARGETS);
    run.seq_len = 2048;
    const int64_t T = 2048, h = 4096, f = 14336;
    est_terms t;
    est_block_saved(&run, &t);
    ck_assert_int_eq(t.total, T * (20 * h + 6 * f + 72) + 2 * 2048 * 128 * 2 + 32 * 2048 * 4);
    /* Dropout 0.1: native_dropout's bool mask per adapter input, 1 byte per
     * element of x (h wide for q and v). */
    run.lora.dropout = 0.1;
    est_terms d;
    est_block_saved(&run, &d);
    ck_assert_int_eq(d.total - t.total, 2 * T * h);
    /* Full checkpointing keeps the bf16 block input only. */
    run.checkpointing = EST_CKPT_FULL;
    ck_assert_int_eq(est_block_kept_bytes(&run), T * h * 2);
}
END_TEST

/* fp32: x.to(fp32) returns x, so q, k and v's A all save the one attention-norm
 * output (T x h x 4 once); B saves three (T, 8) fp32 outputs. */
START_TEST(test_block_saved_lora_fp32_shared) {
    est_run run = lora_run("llama3-8b", 8, EST_LORA_BIT(EST_LORA_Q) | EST_LORA_BIT(EST_LORA_K) |
                                             EST_LORA_BIT(EST_LORA_V));
    run.precision = EST_PREC_FP32;
    run.seq_len = 512;
    const int64_t T = 512, h = 4096;
    est_terms with, none;
    est_block_saved(&run, &with);
    run.lora.targets = EST_LORA_BIT(EST_LORA_K); /* the same tensor, once */
    est_block_saved(&run, &none);
    ck_assert_int_eq(with.total - none.total, 2 * T * 8 * 4);
    /* o under SDPA reads SDPA's saved output: nothing new for A, where k's A
     * kept the attention-norm output; both keep one B input. */
    run.lora.targets = EST_LORA_BIT(EST_LORA_O);
    est_terms o;
    est_block_saved(&run, &o);
    ck_assert_int_eq(o.total - none.total, -T * h * 4);
}
END_TEST

/* The optimizer state is the adapters', whatever the model: 2 fp32 moments per
 * adapter element for AdamW. Llama-3-70B (h 8192, KV 1024, 80 layers) q,v
 * r=16: 16*16384 + 16*9216 = 409,600 per layer, x80 = 32,768,000; against
 * Llama-3-8B's 6,815,744 that is 4.81x while the models differ 8.8x. */
START_TEST(test_optimizer_state_tracks_adapters) {
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    est_run small = lora_run("llama3-8b", 16, EST_LORA_DEFAULT_TARGETS);
    small.seq_len = 512;
    ck_assert_msg(est_estimate_run(&small, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 6815744LL * 8);
    /* fp32 gradients, and for a moment autocast's bf16 gradient of the
     * largest adapter weight (q's B, 4096 x 16) before its cast backward. */
    ck_assert_int_eq(e.category_peak[EST_CAT_GRADS], 6815744LL * 4 + 4096 * 16 * 2);
    /* Twice the rank, twice the state. */
    small.lora.rank = 32;
    ck_assert_msg(est_estimate_run(&small, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 2 * 6815744LL * 8);
    est_run big = lora_run("llama3-70b", 16, EST_LORA_DEFAULT_TARGETS);
    big.seq_len = 512;
    big.gpu.memory_bytes = INT64_C(1) << 40; /* only the ledger matters here */
    ck_assert_msg(est_estimate_run(&big, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 32768000LL * 8);
    est_estimate_free(&e);
}
END_TEST

/* The frozen base in bf16 (2 bytes per parameter) plus fp32 adapters at load;
 * the full fine-tune of the same run keeps 16 bytes per parameter and more. */
START_TEST(test_lora_params_and_fraction) {
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    est_run run = lora_run("llama3-8b", 16, EST_LORA_DEFAULT_TARGETS);
    run.seq_len = 512;
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(e.tl.phases[0].bytes[EST_CAT_PARAMS], 8030261248LL * 2 + 6815744LL * 4);
    const int64_t lora_peak = e.peak_allocated_bytes;
    run.lora.rank = 0;
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(lora_peak * 4 < e.peak_allocated_bytes, "LoRA %lld vs full %lld",
                  (long long)lora_peak, (long long)e.peak_allocated_bytes);
    est_estimate_free(&e);
}
END_TEST

START_TEST(test_lora_bad_input) {
    est_run run = lora_run("llama3-8b", 16, EST_LORA_DEFAULT_TARGETS);
    char err[256];
    run.framework = EST_FW_DEEPSPEED; /* ZeRO-1-3 model LoRA (tests/deepspeed_lora.c), ZeRO-0 not */
    run.zero_stage = 0;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "ZeRO-1, 2 and 3"));
    run.framework = EST_FW_HF;
    run.lora.dropout = 1.0;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    run.lora.dropout = 0;
    run.lora.targets = 0;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);

    est_cli cli;
    char *const bad_rank[] = {"ftest", "--model", "llama3-8b", "--lora-rank", "0", NULL};
    ck_assert_int_eq(est_cli_parse(5, bad_rank, &cli, err, sizeof err), -1);
    char *const bad_alpha[] = {"ftest", "--lora-rank", "8", "--lora-alpha", "nan", NULL};
    ck_assert_int_eq(est_cli_parse(5, bad_alpha, &cli, err, sizeof err), -1);
    char *const good[] = {"ftest", "--lora-rank", "8", "--lora-targets", "all-linear",
                          "--lora-dropout", "0.05", NULL};
    ck_assert_int_eq(est_cli_parse(7, good, &cli, err, sizeof err), 0);
    ck_assert_int_eq(cli.lora_rank, 8);
    ck_assert_uint_eq(cli.lora_targets, EST_LORA_ALL_LINEAR);
}
END_TEST

/* A measurement record names LoRA and QLoRA settings as the flags do. */
START_TEST(test_record_lora_fields) {
    const char *line =
        "{\"schema\":\"ftest.record/1\",\"source\":\"test\",\"date\":\"2026-11\","
        "\"framework\":\"hf\",\"hardware\":{\"gpu\":\"h100-80gb\",\"gpus_per_node\":1,"
        "\"nodes\":1},\"config\":{\"model\":\"llama3-8b\",\"micro_batch\":1,\"grad_accum\":1,"
        "\"seq_len\":512,\"precision\":\"bf16-mixed\",\"lora_rank\":16,\"lora_alpha\":32,"
        "\"lora_targets\":\"all-linear\",\"lora_dropout\":0.05,\"quant\":\"nf4\","
        "\"double_quant\":false,\"optimizer\":\"paged-adamw-8bit\"},"
        "\"measured\":{\"oom\":true}}";
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    est_record rec;
    ck_assert_msg(est_record_parse(line, strlen(line), &cat, &rec, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(rec.run.lora.rank, 16);
    ck_assert(rec.run.lora.alpha == 32);
    ck_assert_uint_eq(rec.run.lora.targets, EST_LORA_ALL_LINEAR);
    ck_assert_int_eq(rec.run.quant, EST_QUANT_NF4);
    ck_assert(!rec.run.double_quant);
    ck_assert_int_eq(rec.run.optimizer, EST_OPT_PAGED_ADAMW_8BIT);
    ck_assert_int_eq(est_run_validate(&rec.run, err, sizeof err), 0);
    est_record_free(&rec);
    const char *bad = "{\"schema\":\"ftest.record/1\",\"source\":\"t\",\"date\":\"d\","
                      "\"framework\":\"hf\",\"hardware\":{\"gpu\":\"h100-80gb\"},"
                      "\"config\":{\"model\":\"llama3-8b\",\"lora_targets\":\"q,zz\"},"
                      "\"measured\":{\"oom\":true}}";
    ck_assert_int_eq(est_record_parse(bad, strlen(bad), &cat, &rec, err, sizeof err), -1);
    est_record_free(&rec);
    est_gpu_catalog_free(&cat);
}
END_TEST

Suite *suite_lora(void);
Suite *suite_lora(void) {
    Suite *s = suite_create("lora");
    TCase *tc = tcase_create("lora");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_adapter_params_llama3_8b);
    tcase_add_test(tc, test_targets_parse);
    tcase_add_test(tc, test_block_saved_lora_qv);
    tcase_add_test(tc, test_block_saved_lora_fp32_shared);
    tcase_add_test(tc, test_optimizer_state_tracks_adapters);
    tcase_add_test(tc, test_lora_params_and_fraction);
    tcase_add_test(tc, test_lora_bad_input);
    tcase_add_test(tc, test_record_lora_fields);
    suite_add_tcase(s, tc);
    return s;
}
