/* Answer.AI's FSDP + QLoRA on consumer cards (AnswerDotAI/fsdp_qlora, train.py
 * at git 50efa1e, 2024-03-26; its benchmarks_03_2024.md): pure bf16 QLoRA
 * under FSDP1 with the script's own wrapping, expressed with ftest's flags as
 * docs/validation.md ("Answer.AI's fsdp_qlora on 2 x 24 GB") maps them:
 *   --framework fsdp --fsdp-wrapper torch --stack 2024-04 --precision bf16
 *   --lora-dtype bf16 --quant nf4 --lora-rank 64 --lora-alpha 16
 *   --lora-dropout 0.1 --lora-targets q,k,v,gate,up,down --checkpointing full
 *   --attention sdpa --fsdp-backward-prefetch pre --load-dtype bf16.
 * Model states are derived by hand from the shapes; the peaks are the
 * published figures (torch.cuda.max_memory_allocated / max_memory_reserved
 * of rank 0 from the start of training, train.py lines 788-904). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "estimate.h"
#include "test_util.h"

#define GIB 1073741824.0
#define OPT_LABEL "optimizer step (foreach AdamW)"

/* The command of benchmarks_03_2024.md's template with model, card, type,
 * context, batch and offload filled in; `quant` false for train_type lora. */
static int aai_run(const char *model, const char *gpu, bool quant, const char *seq, const char *batch,
                   bool offload, est_run *run, char *err, size_t errlen) {
    char *argv[64];
    int n = 0;
    const char *fixed[] = {"ftest", "--model", model, "--gpu", gpu, "--gpus", "2", "--framework", "fsdp",
                           "--fsdp-wrapper", "torch", "--stack", "2024-04", "--precision", "bf16",
                           "--lora-dtype", "bf16", "--lora-rank", "64", "--lora-alpha", "16",
                           "--lora-dropout", "0.1", "--lora-targets", "q,k,v,gate,up,down",
                           "--checkpointing", "full", "--attention", "sdpa", "--load-dtype", "bf16",
                           "--seq", seq, "--batch", batch, "--offload", offload ? "optimizer+params" : "none"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[n++] = (char *)fixed[i];
    argv[n++] = "--fsdp-backward-prefetch";
    argv[n++] = "pre";
    if (quant) {
        argv[n++] = "--quant";
        argv[n++] = "nf4";
    }
    return test_cli_try(n, argv, run, err, errlen);
}

static est_run aai(const char *model, const char *gpu, bool quant, const char *seq, const char *batch,
                   bool offload) {
    char err[256];
    est_run run;
    ck_assert_msg(aai_run(model, gpu, quant, seq, batch, offload, &run, err, sizeof err) == 0, "%s",
                  err);
    return run;
}

/* Pure bf16 QLoRA (train.py's default --precision bf16: no MixedPrecision, no
 * autocast) is a run ftest models under FSDP with bf16 adapters; under the HF
 * Trainer prepare_model_for_kbit_training casts the rest to fp32, so it stays
 * refused there, and FSDP refuses it with PEFT's fp32 adapters. */
START_TEST(test_pure_bf16_qlora_accepted) {
    char err[256];
    est_run run;
    ck_assert_int_eq(aai_run("llama2-7b", "rtx3090-24gb", true, "512", "1", false, &run, err, sizeof err), 0);
    char *const hf[] = {"ftest", "--model", "llama2-7b", "--framework", "hf", "--stack", "2024-04",
                        "--precision", "bf16", "--lora-dtype", "bf16", "--lora-rank", "64", "--quant", "nf4"};
    ck_assert_int_ne(test_cli_try(15, hf, &run, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "under FSDP") != NULL, "%s", err);
    char *const fp32_adapters[] = {"ftest", "--model", "llama2-7b", "--gpus", "2", "--framework", "fsdp",
                                   "--zero", "3", "--precision", "bf16", "--lora-rank", "64", "--quant", "nf4"};
    ck_assert_int_ne(test_cli_try(15, fp32_adapters, &run, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "--lora-dtype bf16") != NULL, "%s", err);
}
END_TEST

/* Llama-2-7B (h 4096, I 11008, 32 blocks, vocabulary 32,000, head 128,
 * 4096 positions) on 2 ranks, no offload, the 3090 table's first row.
 * Adapters (r 64) per block: q, k, v 64 x 4096 + 4096 x 64 = 524,288 each;
 * gate, up 64 x 4096 + 11008 x 64 = 966,656 each; down 64 x 11008 + 4096 x 64
 * = 966,656: 4,472,832, x 32 = 143,130,624 elements in bf16. Each A and B is
 * its own unit (train.py get_wrapping_policy: lambda_policy_fn, a leaf with a
 * weight that requires grad), every numel even: each rank holds half.
 *  - gradients (bf16 shards): 71,565,312 x 2 = 143,130,624 bytes;
 *  - AdamW's two bf16 moments (zeros_like(param)): 286,261,248 bytes;
 *  - parameters: a block unit holds q, k, v, o's NF4 codes (16,777,216 / 2 =
 *    8,388,608 bytes each), gate, up, down's (45,088,768 / 2 = 22,544,384
 *    each) stored as bf16 (quant_storage), and two norms of 8,192 bytes:
 *    101,203,968 bytes, 50,601,984 a rank, x 32 = 1,619,263,488; the root
 *    holds the embedding and the LM head (skip_modules lm_head: not
 *    quantized), 32,000 x 4096 x 2 bytes each, and the final norm:
 *    524,296,192, 262,148,096 a rank; the adapters' shards 143,130,624; the
 *    quantization constants, made on every rank and no parameter (train.py
 *    load_and_quantize: "FSDP only syncs parameters and buffers, so the
 *    quant_state isn't copied"), whole: per weight n/64 absmax codes (1 byte),
 *    one fp32 absmax per 256 of them and an fp32 offset: q, k, v, o 262,144 +
 *    1,024 x 4 + 4 = 266,244 each, gate, up, down 704,512 + 2,752 x 4 + 4 =
 *    715,524 each: 3,211,548 a block, 102,769,536 in all; the rotary caches
 *    transformers 4.40 keeps per layer (cos and sin, 4096 x 128 in bf16):
 *    32 x 2 x 1,048,576 = 67,108,864. Sum 2,194,420,608 while the root is
 *    gathered for the embedding's forward (its full copy is communication). */
START_TEST(test_model_states_llama2_7b) {
    est_run run = aai("llama2-7b", "rtx3090-24gb", true, "512", "1", false);
    est_estimate e;
    test_estimate(&run, &e);
    const int64_t blocks = 32 * INT64_C(50601984), root = INT64_C(262148096), adapters = INT64_C(143130624);
    const int64_t constants = 32 * (4 * INT64_C(266244) + 3 * INT64_C(715524)), rope = INT64_C(67108864);
    ck_assert_int_eq(test_row(&e, "forward embedding")->bytes[EST_CAT_PARAMS],
                     blocks + root + adapters + constants + rope);
    ck_assert_int_eq(test_row(&e, "forward embedding")->bytes[EST_CAT_COMM], 2 * root);
    ck_assert_int_eq(test_row(&e, OPT_LABEL)->bytes[EST_CAT_GRADS], INT64_C(143130624));
    ck_assert_int_eq(test_row(&e, OPT_LABEL)->bytes[EST_CAT_OPTIMIZER], INT64_C(286261248));
    est_estimate_free(&e);
}
END_TEST

/* The one pair of published allocated peaks (benchmarks_03_2024.md, under the
 * LoRA table: "the peak allocated memory is 8.28 GiB vs 9.16 GiB" for LoRA,
 * Llama-2-7B, batch 1, context 512 and 2048, 2 x RTX 3090): within 3%. */
START_TEST(test_published_allocated_lora_7b) {
    const char *seq[] = {"512", "2048"};
    const double published_gib[] = {8.28, 9.16};
    for (int i = 0; i < 2; i++) {
        est_run run = aai("llama2-7b", "rtx3090-24gb", false, seq[i], "1", false);
        est_estimate e;
        test_estimate(&run, &e);
        ck_assert_close(e.peak_allocated_bytes / GIB, published_gib[i], 0, 0.03);
        est_estimate_free(&e);
    }
}
END_TEST

/* Every published run ran on its 24 GB card: ftest must say it fits, the
 * tightest first (Yi-34B, 23.05 GiB reserved on a 3090), with the published
 * reserved peak (GiB) within 15% of ftest's on the card. Yi-34B from its
 * config (tests/fixtures/yi-34b-config.json), Mistral-7B v0.2 likewise. */
START_TEST(test_published_runs_fit) {
    static const struct {
        const char *model, *gpu, *seq, *batch;
        bool offload;
        double reserved_gib;
    } rows[] = {
        {"tests/fixtures/yi-34b-config.json", "rtx3090-24gb", "2048", "2", false, 23.05},
        {"tests/fixtures/yi-34b-config.json", "rtx3090-24gb", "2048", "4", true, 22.98},
        {"llama2-70b", "rtx3090-24gb", "2048", "2", true, 14.92},
        {"llama2-7b", "rtx3090-24gb", "2048", "10", false, 20.97},
        {"tests/fixtures/mistral-7b-v0.2-config.json", "rtx4090-24gb", "24576", "1", true, 22.54},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *model = strchr(rows[i].model, '/') ? test_repo_path(rows[i].model) : rows[i].model;
        est_run run = aai(model, rows[i].gpu, true, rows[i].seq, rows[i].batch, rows[i].offload);
        est_estimate e;
        test_estimate(&run, &e);
        ck_assert_msg(e.device_fits, "%s batch %s: does not fit", rows[i].model, rows[i].batch);
        ck_assert_close(est_estimate_reserved_on_card(&e) / GIB, rows[i].reserved_gib, 0, 0.15);
        est_estimate_free(&e);
    }
}
END_TEST

Suite *suite_fsdp_qlora_published(void);
Suite *suite_fsdp_qlora_published(void) {
    Suite *s = suite_create("fsdp_qlora_published");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_pure_bf16_qlora_accepted);
    tcase_add_test(tc, test_model_states_llama2_7b);
    tcase_add_test(tc, test_published_allocated_lora_7b);
    tcase_add_test(tc, test_published_runs_fit);
    suite_add_tcase(s, tc);
    return s;
}
