/* LoRA under FSDP in one dtype (estimator/frameworks/seam_fsdp*.c): fp32 and
 * pure bf16 with bf16 adapters, the adapters as their own units (PEFT's
 * fsdp_auto_wrap_policy) or in their decoder layer's unit (--fsdp-lora-wrap
 * layer), derived here from torch's FSDP source as docs/method.md ("LoRA under
 * FSDP in one dtype") walks it. Every expected figure is arithmetic on shapes.
 *
 * Qwen1.5-0.5B (models/qwen1.5-0.5b.json): h 1024, I 2816, 24 blocks, q/k/v
 * biases; its block U_b = 12,850,176 elements (tests/fsdp.c derives it).
 * LoRA r = 16 on q and v (1024 -> 1024 each): A 16 x 1024 and B 1024 x 16,
 * 16,384 elements each, 65,536 per block. On 8 ranks. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli_run.h"
#include "estimate.h"
#include "lora.h"
#include "options.h"
#include "record.h"
#include "test_util.h"

#define QWEN_UB INT64_C(12850176)
#define ADAPTER INT64_C(16384)      /* one A or B: 16 x 1024 */
#define BLOCKS 24
#define OPT_LABEL "optimizer step (foreach AdamW)"
#define REDUCED "gradients reduce-scattered"

static est_run lora_run(est_precision p, int rank) {
    est_run run = test_run_of("qwen1.5-0.5b", "h100");
    run.framework = EST_FW_FSDP;
    run.gpus_per_node = 8;
    run.zero_stage = 3;
    run.seq_len = 512;
    run.precision = p;
    run.rank = rank;
    run.lora.rank = 16;
    run.lora.alpha = 32;
    run.lora.targets = EST_LORA_BIT(EST_LORA_Q) | EST_LORA_BIT(EST_LORA_V);
    return run;
}

/* FSDP1, fp32, adapters in the layer's FlatParameter (use_orig_params=True):
 * the unit is U = 12,850,176 + 65,536 = 12,915,712 elements, 1,614,464 per
 * rank. Every view of it requires grad (_flat_param.py _use_unsharded_views),
 * so the reduce-scattered gradient is the whole shard of every block (the
 * root, all frozen, has none): 24 x 1,614,464 x 4 = 61,997,568 bytes.
 * The optimizer holds the adapters' parts in this rank's shard
 * (_use_sharded_grad_views). In registration order a block flattens
 * q.weight 1,048,576, q.bias 1024, q's A and B (to 1,082,368), k.weight and
 * k.bias (to 2,131,968), v.weight and v.bias (to 3,181,568), v's A and B (to
 * 3,214,336), then o and the MLP: rank 0's range [0, 1,614,464) holds q's
 * adapters whole, rank 1's [1,614,464, 3,228,928) v's, rank 7's
 * [11,301,248, 12,915,712) none. AdamW: two fp32 states per element:
 * ranks 0 and 1: 24 x 32,768 x 8 = 6,291,456 bytes; rank 7: 0. */
START_TEST(test_fsdp1_layer_fp32) {
    est_estimate e;
    est_run run = lora_run(EST_PREC_FP32, 0);
    run.fsdp_lora_wrap = EST_FSDP_LORA_WRAP_LAYER;
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, REDUCED)->bytes[EST_CAT_GRADS], BLOCKS * INT64_C(1614464) * 4);
    ck_assert_int_eq(test_row(&e, OPT_LABEL)->bytes[EST_CAT_OPTIMIZER], BLOCKS * 2 * ADAPTER * 8);
    est_estimate_free(&e);
    run.rank = 1;
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, OPT_LABEL)->bytes[EST_CAT_OPTIMIZER], BLOCKS * 2 * ADAPTER * 8);
    est_estimate_free(&e);
    run.rank = 7;
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, OPT_LABEL)->bytes[EST_CAT_OPTIMIZER], 0);
    est_estimate_free(&e);
}
END_TEST

/* FSDP2, fp32, adapters in the layer's group: only the parameters with a
 * gradient are reduce-scattered (_fsdp_param_group.py post_backward:
 * fsdp_params_with_grad), each sharded on dim 0: A (16 rows) 2 rows x 1024,
 * B (1024 rows) 128 rows x 16: 2048 elements each, 4 per block:
 * 24 x 4 x 2048 x 4 = 786,432 bytes of gradients, twice that of AdamW state. */
START_TEST(test_fsdp2_layer_fp32) {
    est_estimate e;
    est_run run = lora_run(EST_PREC_FP32, 0);
    run.fsdp_version = EST_FSDP2;
    run.fsdp_lora_wrap = EST_FSDP_LORA_WRAP_LAYER;
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, REDUCED)->bytes[EST_CAT_GRADS], BLOCKS * 4 * 2048 * 4);
    ck_assert_int_eq(test_row(&e, OPT_LABEL)->bytes[EST_CAT_OPTIMIZER], BLOCKS * 4 * 2048 * 8);
    est_estimate_free(&e);
}
END_TEST

/* Pure bf16 with the adapters kept in bf16 (PEFT autocast_adapter_dtype=False,
 * torchtune), each its own FSDP1 unit of 16,384 elements, 2048 per rank: the
 * sharded gradients 96 x 2048 x 2 = 393,216 bytes and AdamW's two bf16 states
 * (torch/optim/adamw.py _init_group: zeros_like(param)) 786,432; the same run
 * with fp32 adapters under bf16-mixed keeps twice both. */
START_TEST(test_pure_bf16_adapters) {
    est_estimate e;
    est_run run = lora_run(EST_PREC_BF16, 0);
    run.lora.base_dtype = true;
    run.load_dtype = EST_LOAD_BF16;
    ck_assert_int_eq(est_lora_weight_bytes(&run), 2);
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, REDUCED)->bytes[EST_CAT_GRADS], BLOCKS * 4 * 2048 * 2);
    ck_assert_int_eq(test_row(&e, OPT_LABEL)->bytes[EST_CAT_OPTIMIZER], BLOCKS * 4 * 2048 * 4);
    est_estimate_free(&e);
    /* reduce_dtype fp32: the shards' gradients are cast back to bf16 */
    run.fsdp_reduce = EST_REDUCE_FP32;
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, REDUCED)->bytes[EST_CAT_GRADS], BLOCKS * 4 * 2048 * 2);
    est_estimate_free(&e);
    run = lora_run(EST_PREC_BF16_MIXED, 0);
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, REDUCED)->bytes[EST_CAT_GRADS], BLOCKS * 4 * 2048 * 4);
    ck_assert_int_eq(test_row(&e, OPT_LABEL)->bytes[EST_CAT_OPTIMIZER], BLOCKS * 4 * 2048 * 8);
    est_estimate_free(&e);
}
END_TEST

/* FSDP2's CPUOffloadPolicy, pure bf16 with bf16 adapters: the host keeps
 * every parameter's shard pinned (_fsdp_param.py _init_sharded_param:
 * .cpu().pin_memory(), torch 2.11), and each adapter's gradient, copied back
 * with .to("cpu", non_blocking=True) into pinned memory
 * (_fsdp_collectives.py foreach_reduce); the pinned allocator rounds each to
 * a power of two (CachingHostAllocator.h PowerOf2Ceil). Each parameter is
 * chunked on dim 0 over 8 ranks (every dim 0 of the model divides by 8), in
 * bf16:
 *  - the tied embedding 151,936 x 1024: 18,992 rows, 38,895,616 bytes -> 2^26;
 *  - per block: q, k, v, o weights 128 x 1024 = 262,144 bytes (a power of
 *    two), q/k/v biases and the two norms 128 x 2 = 256 bytes, gate and up
 *    352 x 1024 and down 128 x 2816, 720,896 bytes -> 2^20: 4 x 262,144 +
 *    5 x 256 + 3 x 1,048,576 = 4,195,584, x 24 = 100,694,016;
 *  - the final norm: 256;
 *  - the 96 adapters' 2048-element shards: 4096 bytes pinned, their
 *    gradients 4096 pinned, AdamW's two bf16 moments 8192 unpinned.
 * 67,108,864 + 100,694,016 + 256 + 96 x 16,384 = 169,376,000 bytes, whether
 * the adapters are groups of their own or in their layer's. */
START_TEST(test_fsdp2_offload_host) {
    est_estimate e;
    est_run run = lora_run(EST_PREC_BF16, 0);
    run.lora.base_dtype = true;
    run.load_dtype = EST_LOAD_BF16;
    run.fsdp_version = EST_FSDP2;
    run.offload = EST_OFFLOAD_OPTIMIZER_PARAMS;
    test_estimate(&run, &e);
    ck_assert_int_eq(e.cpu_bytes, INT64_C(169376000));
    est_estimate_free(&e);
    run.fsdp_lora_wrap = EST_FSDP_LORA_WRAP_LAYER;
    test_estimate(&run, &e);
    ck_assert_int_eq(e.cpu_bytes, INT64_C(169376000));
    est_estimate_free(&e);
}
END_TEST

static void refused(const est_run *run, const char *words) {
    char err[256] = "";
    est_estimate e;
    est_estimate_init(&e);
    ck_assert_int_eq(est_estimate_run(run, &e, err, sizeof err), -1);
    ck_assert_msg(strstr(err, words), "%s", err);
    est_estimate_free(&e);
}

/* One line each for what is not modelled. */
START_TEST(test_refused) {
    est_run run = lora_run(EST_PREC_BF16, 0); /* PEFT's fp32 adapters over a bf16 base */
    refused(&run, "--lora-dtype bf16");
    run = lora_run(EST_PREC_BF16_MIXED, 0);
    run.lora.base_dtype = true;
    refused(&run, "--precision bf16");
    run = lora_run(EST_PREC_BF16_MIXED, 0); /* FSDP1 cannot flatten fp32 adapters with bf16 */
    run.fsdp_lora_wrap = EST_FSDP_LORA_WRAP_LAYER;
    refused(&run, "one dtype");
    run = lora_run(EST_PREC_FP32, 0);
    run.load_dtype = EST_LOAD_BF16;
    refused(&run, "--load-dtype bf16");
    run = lora_run(EST_PREC_FP32, 0);
    run.fsdp_lora_wrap = EST_FSDP_LORA_WRAP_LAYER;
    run.offload = EST_OFFLOAD_OPTIMIZER_PARAMS;
    refused(&run, "CPU offload");
    run = lora_run(EST_PREC_FP32, 0);
    run.zero_stage = 0; /* NO_SHARD */
    refused(&run, "FULL_SHARD");
    run = lora_run(EST_PREC_BF16_MIXED, 0); /* LLM.int8's int8 weights: FSDP1 cannot flatten them */
    run.quant = EST_QUANT_INT8;
    refused(&run, "Cannot flatten integer dtype tensors");
}
END_TEST

/* A record's wrapping: absent, PEFT's; a cpu-trace record's settings (the
 * probe wraps decoder layers alone), the layer's; config.fsdp_lora_wrap wins;
 * a name of neither is bad input. */
static int parse_wrap(const char *config, est_fsdp_lora_wrap *out) {
    char json[1024], err[256];
    snprintf(json, sizeof json,
             "{\"schema\":\"ftest.record/1\",\"framework\":\"fsdp\",\"hardware\":{\"gpu\":\"h100\","
             "\"gpus_per_node\":2,\"nodes\":1},\"config\":{\"model\":\"qwen1.5-0.5b\",\"micro_batch\":1,"
             "\"seq_len\":64,\"zero\":3%s},\"measured\":{\"ranks\":[{\"rank\":0,\"peak_allocated_bytes\":1}]}}",
             config);
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    est_record rec;
    int rc = est_record_parse(json, strlen(json), &cat, &rec, err, sizeof err);
    if (rc == 0) {
        *out = rec.run.fsdp_lora_wrap;
        est_record_free(&rec);
    }
    est_gpu_catalog_free(&cat);
    return rc;
}

START_TEST(test_record_wrap) {
    est_fsdp_lora_wrap w;
    ck_assert_int_eq(parse_wrap("", &w), 0);
    ck_assert_int_eq(w, EST_FSDP_LORA_WRAP_PEFT);
    ck_assert_int_eq(parse_wrap(",\"settings\":{\"use_orig_params\":true}", &w), 0);
    ck_assert_int_eq(w, EST_FSDP_LORA_WRAP_LAYER);
    ck_assert_int_eq(parse_wrap(",\"settings\":{},\"fsdp_lora_wrap\":\"peft\"", &w), 0);
    ck_assert_int_eq(w, EST_FSDP_LORA_WRAP_PEFT);
    ck_assert_int_eq(parse_wrap(",\"fsdp_lora_wrap\":\"unit\"", &w), -1);
}
END_TEST

START_TEST(test_cli) {
    char err[256];
    est_run run;
    char *const ok[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp", "--zero", "3",
                        "--lora-rank", "8", "--precision", "bf16", "--lora-dtype", "bf16", "--fsdp-lora-wrap", "layer"};
    ck_assert_msg(test_cli_try(15, ok, &run, err, sizeof err) == 0, "%s", err);
    ck_assert(run.lora.base_dtype);
    ck_assert_int_eq(run.fsdp_lora_wrap, EST_FSDP_LORA_WRAP_LAYER);
    /* the HF Trainer keeps bf16 adapters too, in pure bf16 only */
    char *const hf[] = {"ftest", "--model", "qwen1.5-0.5b", "--lora-rank", "8", "--lora-dtype", "bf16"};
    ck_assert_int_eq(test_cli_try(7, hf, &run, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--precision bf16"), "%s", err);
    char *const hf_bf16[] = {"ftest", "--model", "qwen1.5-0.5b", "--lora-rank", "8", "--lora-dtype", "bf16",
                             "--precision", "bf16"};
    ck_assert_msg(test_cli_try(9, hf_bf16, &run, err, sizeof err) == 0, "%s", err);
    char *const ds[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "deepspeed", "--zero", "2",
                        "--lora-rank", "8", "--lora-dtype", "bf16", "--precision", "bf16"};
    ck_assert_int_eq(test_cli_try(13, ds, &run, err, sizeof err), -1);
    char *const bad[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp", "--fsdp-lora-wrap", "unit"};
    ck_assert_int_eq(test_cli_try(7, bad, &run, err, sizeof err), -1);
}
END_TEST

/* FSDP1 casts per FlatParameter (_flat_param.py _uses_param_mixed_precision:
 * the forward dtype differs from the FlatParameter's own). Under bf16-mixed
 * with PEFT's fp32 adapters over a bf16 base only the adapters' units get a
 * _mp_shard; the frozen units, bf16 already, are all-gathered straight from
 * their shard. The root (tied embedding 151,936 x 1024 + final norm 1024 =
 * 155,583,488 elements, divisible by 8: no padding) is gathered at the
 * embedding: 311,166,976 bytes in bf16 and nothing beside it (a bf16 cast of
 * its shard would add 155,583,488 / 8 x 2 = 38,895,872, still in flight).
 * After block 0's forward the root, block 0 (12,850,176) and its four
 * adapters (4 x 16,384) are gathered, in bf16. */
START_TEST(test_frozen_units_cast_nothing) {
    est_estimate e;
    est_run run = lora_run(EST_PREC_BF16_MIXED, 0);
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, "forward embedding")->bytes[EST_CAT_COMM], INT64_C(155583488) * 2);
    ck_assert_int_eq(test_row(&e, "forward layer 0")->bytes[EST_CAT_COMM],
                     (INT64_C(155583488) + QWEN_UB + 4 * ADAPTER) * 2);
    est_estimate_free(&e);
}
END_TEST

/* PEFT's FSDP + QLoRA example (docs/source/accelerate/fsdp.md: Llama-2-70B on
 * 2 ranks, fsdp_config_qlora.yaml with offload_params and
 * cpu_ram_efficient_loading, LoRA r 8 on all linears, NF4 with double
 * quantization, bnb_4bit_quant_storage bf16): the host, derived from the
 * shapes of models/llama2-70b.json (h 8192, I 28672, 8 KV heads of 128,
 * vocabulary 32000, 80 layers, untied head).
 *  - A block's seven Linears hold 2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x
 *    28672 = 855,638,016 weights; their NF4 codes, n/2 bytes, packed in
 *    bf16 elements are 213,909,504 elements, plus two norms of 8192:
 *    213,925,888 elements. Half on each rank: 106,962,944 x 2 = 213,925,888
 *    bytes, pinned as 2^28 = 268,435,456 (torch 2.11 CachingHostAllocator.h:
 *    PowerOf2Ceil), twice (the shard and _cpu_grad, _flat_param.py
 *    init_flat_param_attributes).
 *  - The root: 2 x 32000 x 8192 + 8192 = 524,296,192 elements; a shard of
 *    524,296,192 bytes, pinned as 2^29 = 536,870,912, twice.
 *  - A layer's fourteen adapter units in fp32 (accelerate upcasts the
 *    trainable FlatParameters), half on each rank: A of q, k, v, o, gate, up
 *    and B of q, o, down are 8 x 8192 = 65,536 elements, a 131,072-byte
 *    shard; B of k and v 8 x 1024, 16,384 bytes; B of gate and up and A of
 *    down 8 x 28672, 458,752 bytes, pinned as 524,288. Pinned per layer:
 *    9 x 131,072 + 2 x 16,384 + 3 x 524,288 = 2,785,280, twice.
 * Pinned in all: 2 x (80 x 268,435,456 + 536,870,912 + 80 x 2,785,280)
 * = 44,469,059,584. The unpinned shards the constructor left are there too at
 * the lazy init: 80 x 213,925,888 + 524,296,192 (the base) + 103,546,880 / 2
 * x 4 (the adapters, 103,546,880 elements as PEFT counts them) =
 * 17,845,460,992, more than AdamW's moments later (207,093,760 x 2). Per rank
 * 62,314,520,576 bytes.
 * Loading: rank 0 keeps the quantized model on the host as transformers
 * leaves it (codes and the rest in bf16, the adapters in fp32; the others put
 * theirs on the meta device; the quantization constants stay on the GPU):
 * 2 x 17,845,460,992 per node, spread over the 2 processes. */
static est_run peft_qlora_70b(const char *stack) {
    char err[256];
    est_run run;
    char *const argv[] = {"ftest", "--model", "llama2-70b", "--gpus", "2", "--gpu", "a100-80gb",
                          "--framework", "fsdp", "--lora-rank", "8", "--lora-targets", "all-linear",
                          "--lora-dropout", "0.1", "--quant", "nf4", "--checkpointing", "full",
                          "--seq", "2048", "--batch", "2", "--grad-accum", "2", "--attention", "flash",
                          "--packing", "--fsdp-backward-prefetch", "pre", "--offload", "optimizer+params",
                          "--stack", (char *)stack};
    ck_assert_msg(test_cli_try(34, argv, &run, err, sizeof err) == 0, "%s", err);
    return run;
}

START_TEST(test_qlora_offload_host_llama2_70b) {
    est_run run = peft_qlora_70b("2025-02");
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(est_lora_params(&run), INT64_C(103546880));
    ck_assert_int_eq(e.cpu_bytes, INT64_C(44469059584) + INT64_C(17845460992));
    ck_assert_int_eq(e.cpu_load_bytes, INT64_C(17845460992));
    est_estimate_free(&e);
}
END_TEST

/* The same run on the April 2024 stack (PEFT 0.10.0, accelerate 0.29.3), the
 * one PEFT's guide was written against: PEFT 0.10 gives each adapter its base
 * weight's floating dtype (lora/layer.py update_layer: Params4bit is bf16
 * under bnb_4bit_quant_storage bf16) and accelerate 0.29 does not upcast the
 * FlatParameters, so the adapters train in bf16 ("pure bfloat16
 * finetuning"). Their shards halve: 65,536 bytes, 8,192, and 229,376 pinned
 * as 262,144: per layer 9 x 65,536 + 2 x 8,192 + 3 x 262,144 = 1,392,640.
 * Pinned: 2 x (80 x 268,435,456 + 536,870,912 + 80 x 1,392,640)
 * = 44,246,237,184; unpinned 17,638,367,232 + 103,546,880 / 2 x 2
 * = 17,741,914,112 (more than AdamW's bf16 moments, 207,093,760): per rank
 * 61,988,151,296. Loading: 17,741,914,112 per process. */
START_TEST(test_qlora_offload_host_llama2_70b_2024) {
    est_run run = peft_qlora_70b("2024-04");
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(e.cpu_bytes, INT64_C(44246237184) + INT64_C(17741914112));
    ck_assert_int_eq(e.cpu_load_bytes, INT64_C(17741914112));
    est_estimate_free(&e);
}
END_TEST

Suite *suite_fsdp_lora(void);
Suite *suite_fsdp_lora(void) {
    Suite *s = suite_create("fsdp_lora");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fsdp1_layer_fp32);
    tcase_add_test(tc, test_fsdp2_layer_fp32);
    tcase_add_test(tc, test_pure_bf16_adapters);
    tcase_add_test(tc, test_fsdp2_offload_host);
    tcase_add_test(tc, test_qlora_offload_host_llama2_70b);
    tcase_add_test(tc, test_qlora_offload_host_llama2_70b_2024);
    tcase_add_test(tc, test_frozen_units_cast_nothing);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_cli);
    tcase_add_test(tc, test_record_wrap);
    suite_add_tcase(s, tc);
    return s;
}
