/* QLoRA (estimator/model/quant.c) against hand derivations from bitsandbytes
 * 0.44-0.45 (functional.py quantize_4bit, nn/modules.py, autograd/_functions.py)
 * and peft 0.13 prepare_model_for_kbit_training (docs/method.md, "QLoRA"). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cJSON.h>

#include "estimate.h"
#include "hf_modeling.h"
#include "lora.h"
#include "params.h"
#include "quant.h"
#include "block.h"
#include "seam_regime.h"
#include "stack.h"
#include "test_util.h"
#include "step_build.h"
#include "timing.h"

static est_run qlora_run(const char *model, est_quant q, int64_t rank) {
    est_run run;
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load(model, &m, err, sizeof err) == 0, "%s", err);
    est_run_defaults(&run, &m, NULL);
    run.framework = EST_FW_HF;
    run.quant = q;
    run.lora.rank = rank;
    run.lora.targets = EST_LORA_ALL_LINEAR;
    run.gpu.memory_bytes = INT64_C(1) << 40; /* only the ledger matters */
    return run;
}

/* Llama-3-70B: per block q and o 8192x8192 = 67,108,864; k and v 8192x1024 =
 * 8,388,608; gate, up, down 8192x28672 = 234,881,024: S = 855,638,016 linear
 * weights per block, each tensor a multiple of 64 x 256 = 16,384. The rest of
 * the published 70,553,706,496 (embedding, head, 161 norms) is
 * 70,553,706,496 - 80 S = 2,102,665,216, in fp32 after
 * prepare_model_for_kbit_training: 8,410,660,864 bytes.
 *   NF4 + double quant: S/2 codes + S/64 8-bit absmax + S/16384 fp32 second
 *   absmax x4 + 7 fp32 offsets = 427,819,008 + 13,369,344 + 208,896 + 28
 *   = 441,397,276 per block;
 *   NF4 alone: S/2 + S/64 x 4 = 481,296,384 per block;
 *   int8: S codes + one fp32 scale per output row (q 8192, k 1024, v 1024,
 *   o 8192, gate 28672, up 28672, down 8192: 83,968 rows x 4 = 335,872),
 *   so 855,973,888 per block. */
START_TEST(test_base_bytes_llama3_70b) {
    est_run run = qlora_run("llama3-70b", EST_QUANT_NF4, 64);
    est_params p;
    est_count_params(&run.model, run.layers_used, &p);
    ck_assert_int_eq(p.total, INT64_C(70553706496));
    const int64_t rest = INT64_C(2102665216) * 4;
    ck_assert_int_eq(est_frozen_base_bytes(&run, &p), 80 * INT64_C(441397276) + rest);
    run.double_quant = false;
    ck_assert_int_eq(est_frozen_base_bytes(&run, &p), 80 * INT64_C(481296384) + rest);
    run.quant = EST_QUANT_INT8;
    ck_assert_int_eq(est_frozen_base_bytes(&run, &p), 80 * INT64_C(855973888) + rest);
}
END_TEST

/* The dequantized temporary: the largest block weight (Llama-3-8B's 14336 x
 * 4096 MLP matrices) in the compute dtype, in forward and in backward;
 * --compute-dtype fp32 doubles it. */
START_TEST(test_dequant_transient) {
    est_run run = qlora_run("llama3-8b", EST_QUANT_NF4, 16);
    const int64_t w = INT64_C(14336) * 4096;
    ck_assert_int_eq(est_quant_forward_transient(&run), w * 2);
    ck_assert_int_eq(est_quant_backward_transient(&run), w * 2);
    run.quant_compute = EST_CDT_FP32;
    ck_assert_int_eq(est_quant_forward_transient(&run), w * 4);
    run.quant = EST_QUANT_NONE;
    ck_assert_int_eq(est_quant_forward_transient(&run), 0);
}
END_TEST

/* QLoRA on Llama-3-70B, rank 64 on every linear, 2048 tokens, full
 * checkpointing (prepare_model_for_kbit_training's default), paged 8-bit
 * AdamW: a small fraction of the same run's full fine-tune (fp32 weights,
 * gradients and AdamW state alone are 16 bytes x 70.5 B = 1.13 TB). The
 * adapters: 64 x (16384 + 2 x 9216 + 16384 + 3 x 36864) = 10,354,688 per
 * block, 828,375,040 in all. */
START_TEST(test_qlora_70b_fraction) {
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    est_run run = qlora_run("llama3-70b", EST_QUANT_NF4, 64);
    run.seq_len = 2048;
    run.checkpointing = EST_CKPT_FULL;
    run.optimizer = EST_OPT_PAGED_ADAMW_8BIT;
    ck_assert_int_eq(est_lora_params(&run), INT64_C(828375040));
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    const int64_t qlora = e.peak_allocated_bytes;
    /* Frozen base + fp32 adapters at load. */
    ck_assert_int_eq(e.tl.phases[0].bytes[EST_CAT_PARAMS],
                     80 * INT64_C(441397276) + INT64_C(2102665216) * 4 + INT64_C(828375040) * 4);
    run.lora.rank = 0;
    run.quant = EST_QUANT_NONE;
    run.optimizer = EST_OPT_ADAMW;
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(qlora * 15 < e.peak_allocated_bytes, "QLoRA %lld vs full %lld",
                  (long long)qlora, (long long)e.peak_allocated_bytes);
    est_estimate_free(&e);
}
END_TEST

START_TEST(test_quant_bad_input) {
    est_run run = qlora_run("llama3-8b", EST_QUANT_NF4, 0);
    char err[256];
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "--lora-rank"));
    run.lora.rank = 8;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), 0);
    run.precision = EST_PREC_BF16;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    run.precision = EST_PREC_BF16_MIXED;
    run.quant = EST_QUANT_NONE;
    run.quant_compute = EST_CDT_FP32;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    est_quant q;
    ck_assert_int_eq(est_quant_parse("nf4", &q, err, sizeof err), 0);
    ck_assert_int_eq(q, EST_QUANT_NF4);
    ck_assert_int_eq(est_quant_parse("fp4", &q, err, sizeof err), -1);
}
END_TEST

/* FSDP FULL_SHARD + QLoRA, Llama-3-70B on 2 GPUs, r=16 on every linear. Per
 * rank, the sharded flat parameters: per block the NF4 codes S/2 =
 * 427,819,008 bytes packed in bf16 elements plus two bf16 norms 32,768, half
 * each: 80 x 213,925,888 = 17,114,071,040; the root unit (embedding, head,
 * final norm in bf16: no fp32 upcast in sharded QLoRA) 4,202,708,992 bytes,
 * half 2,101,354,496. Every rank keeps all quantization constants: 80 x
 * (13,369,344 + 208,896 + 28) = 1,086,261,440. Each adapter weight is a unit
 * of its own (PEFT's fsdp_auto_wrap_policy): 16 x 161,792 x 80 = 207,093,760
 * fp32 elements, half each: 414,187,520 bytes. The root is wrapped last: its
 * parameters on the device (4,202,708,992), their concatenation (the same) and
 * the shard cloned from it (2,101,354,496) exist together on top of every
 * block's and adapter's shard and the constants: the load's highest point.
 * A block's adapters read x itself (gathered in bf16 by MixedPrecision):
 * the attention-norm output, the MLP-norm output and the SwiGLU product
 * once each (T x (2h + f) x 2), o's input is SDPA's saved output; B saves
 * seven (T, 16) bf16 outputs. */
START_TEST(test_fsdp_qlora) {
    est_run run = qlora_run("llama3-70b", EST_QUANT_NF4, 16);
    run.framework = EST_FW_FSDP;
    run.zero_stage = 3;
    run.gpus_per_node = 2;
    run.seq_len = 1024;
    run.checkpointing = EST_CKPT_FULL;
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(e.tl.phases[0].label, "model sharded");
    ck_assert_int_eq(e.tl.phases[0].own_max[EST_CAT_PARAMS],
                     INT64_C(17114071040) + INT64_C(414187520) + INT64_C(1086261440) +
                         2 * INT64_C(4202708992) + INT64_C(2101354496));
    est_estimate_free(&e);
    est_terms lora, frozen;
    est_block_saved(&run, &lora);
    const int64_t T = 1024, h = 8192, f = 28672;
    /* The same block without adapters saves neither x nor B's inputs. */
    est_run none = run;
    none.lora.targets = EST_LORA_BIT(EST_LORA_O); /* o alone: shares SDPA's output */
    est_block_saved(&none, &frozen);
    ck_assert_int_eq(lora.total - frozen.total, T * (2 * h + f) * 2 + 6 * T * 16 * 2);
    /* Refused: SHARD_GRAD_OP, and DeepSpeed ZeRO-3 with LLM.int8 (NF4 under
     * ZeRO-3 is modelled: tests/deepspeed_lora.c test_zero3_qlora_states). */
    run.zero_stage = 2;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    run.zero_stage = 3;
    run.framework = EST_FW_DEEPSPEED;
    run.quant = EST_QUANT_INT8;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
}
END_TEST

/* The H200 day's QLoRA records (calibrate/records/probe-h200-2026-11-26.jsonl)
 * list torch 2.11.0+cu130, transformers 5.17.0 and DeepSpeed 0.19.8: they get
 * the stack of that image, whose SDPA takes Llama-3.2-1B's grouped keys and
 * values as they are (transformers 5.17 integrations/sdpa_attention.py
 * use_gqa_in_sdpa: no mask, head_dim 64 <= 256, so enable_gqa=True and no
 * repeat_kv), where 4.49 (2025-02, the stack such records fell back to)
 * repeats them to 32 heads. At the peak (loss backward, every block's saved
 * tensors alive) the two differ by what the repeat saves: per block k and v,
 * each T x (32 - 8) x 64 elements, in the compute dtype (SDPA under autocast
 * saves bf16 casts): 16 blocks x 1024 tokens x 2 x 1536 x 2 B = 100,663,296. */
START_TEST(test_h200_image_stack_gqa) {
    cJSON *j = cJSON_Parse("{\"torch\":\"2.11.0+cu130\",\"transformers\":\"5.17.0\","
                           "\"deepspeed\":\"0.19.8\"}");
    const est_stack *gpu = est_stack_of_versions(j);
    cJSON_Delete(j);
    ck_assert_ptr_nonnull(gpu);
    ck_assert_str_eq(gpu->name, "2026-11-gpu");
    est_run run = qlora_run("llama3.2-1b", EST_QUANT_NF4, 16);
    run.double_quant = false;
    run.seq_len = 1024;
    run.checkpointing = EST_CKPT_NONE;
    /* the probe's optimizer (optim adamw_torch: foreach on both stacks); the
     * Trainer's default on 5.17 with torch 2.11 is the fused one, whose
     * per-parameter step counters on the device would differ too */
    run.adamw_impl = EST_ADAMW_FOREACH;
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    int64_t peak[2];
    const char *stacks[2] = {"2025-02", "2026-11-gpu"};
    for (int k = 0; k < 2; k++) {
        run.stack = est_stack_find(stacks[k]);
        ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
        ck_assert_str_eq(e.tl.phases[e.peak_index].label, "loss backward");
        peak[k] = e.peak_allocated_bytes;
    }
    est_estimate_free(&e);
    ck_assert_int_eq(peak[0] - peak[1], INT64_C(16) * 1024 * 2 * (32 - 8) * 64 * 2);
}
END_TEST

/* PEFT's bitsandbytes LoRA layers under autocast (peft 0.21.2
 * tuners/lora/bnb.py Linear4bit.forward: requires_conversion = not
 * torch.is_autocast_enabled()) hand x to lora_A as it is. o_proj's input is
 * SDPA's bf16 output, which SDPA already saves, so adapting o_proj adds only
 * lora_B's input (T x r bf16) and autocast's cached bf16 casts of A (r x 2048)
 * and B (2048 x r) to a Llama-3.2-1B block's saved bytes at T = 1024, r = 16:
 * 1024 x 16 x 2 + (16 x 2048 + 2048 x 16) x 2 = 163,840. PEFT's plain Linear
 * (layer.py) casts x to the fp32 adapter's dtype first, so over a bf16 base
 * lora_A saves a bf16 cast of that copy, a tensor of its own: T x 2048 x 2 =
 * 4,194,304 more. */
START_TEST(test_bnb_adapter_input_under_autocast) {
    int64_t delta[2];
    for (int quant = 0; quant < 2; quant++) {
        est_run run = qlora_run("llama3.2-1b", quant ? EST_QUANT_NF4 : EST_QUANT_NONE, 16);
        run.seq_len = 1024;
        run.stack = est_stack_find("2026-11-gpu");
        int64_t saved[2];
        for (int o = 0; o < 2; o++) {
            run.lora.targets = o ? EST_LORA_ALL_LINEAR : (EST_LORA_ALL_LINEAR & ~EST_LORA_BIT(EST_LORA_O));
            est_regime g, ends;
            est_hf_regime(&run, &g, &ends);
            ck_assert(g.autocast);
            static est_module m;
            char err[256];
            ck_assert_msg(est_module_block(&run, &g, false, &m, err, sizeof err) == 0, "%s", err);
            saved[o] = est_module_saved_bytes(&m);
        }
        delta[quant] = saved[1] - saved[0];
    }
    const int64_t lora_o = INT64_C(1024) * 16 * 2 + (INT64_C(16) * 2048 + INT64_C(2048) * 16) * 2;
    ck_assert_int_eq(delta[1], lora_o);
    ck_assert_int_eq(delta[0], lora_o + INT64_C(1024) * 2048 * 2);
}
END_TEST

/* LLM.int8's backward (bitsandbytes 0.50.2 autograd/_functions.py
 * MatMul8bitLt.backward) makes grad_A = matmul(grad_output.to(dtype_A), CB
 * dequantized to dtype_A): outside autocast, in the input's dtype, which is
 * fp32 for the six Linears fed by the fp32 residual stream's norms and the
 * fp32 SwiGLU product (q, k, v, gate, up, down; o reads SDPA's bf16 output).
 * Llama-3.2-1B at 2048 tokens: 2 x 2048 x (2048 x (2048 + 512 + 512) + 3 x
 * 2048 x 8192) = 231,928,233,984 FLOPs per block in fp32, 16 blocks, so the
 * micro-batch's device time is at least 3.71e12 / 66.9e12 FLOP/s (the H200's
 * fp32 peak, data sheet) = 55.5 ms, whatever the rest costs. */
START_TEST(test_int8_backward_in_input_dtype) {
    est_run run = test_run_of("llama3.2-1b", "h200-141gb");
    run.framework = EST_FW_HF;
    run.quant = EST_QUANT_INT8;
    run.lora.rank = 16;
    run.lora.targets = EST_LORA_ALL_LINEAR;
    run.seq_len = 2048;
    run.checkpointing = EST_CKPT_NONE;
    est_constants k;
    est_constants_defaults(&k);
    est_time_detail d;
    est_time_model(&run, &k, &d);
    ck_assert(d.modelled);
    const double fp32_flops = 16 * 2.0 * 2048 * (2048.0 * (2048 + 512 + 512) + 3 * 2048.0 * 8192);
    ck_assert_msg(d.gpu_microbatch_s >= fp32_flops / (run.gpu.fp32_tflops * 1e12), "%g s",
                  d.gpu_microbatch_s);
}
END_TEST

/* Under the HF Trainer's autocast PEFT's plain Linear casts x to the fp32
 * adapter's dtype and autocast casts that copy to bf16 for lora_A (tuners/
 * lora/layer.py, peft 0.21.2): two copies of the adapter's input in forward
 * (read 2, write 4; read 4, write 2 bytes per element), on top of the
 * scaling (`* scaling`: read and write T x d_out) and the add into the
 * result (read 2, write 1): 5 passes over T x d_out in bf16 (layer.py line
 * 1102). Adapting k_proj as well as q_proj on Llama-3.2-1B (k: 2048 -> 512)
 * at T = 1024 adds to one block's forward traffic 1024 x 2048 x 12 + 5 x
 * 1024 x 512 x 2 = 30,408,704 bytes; a bitsandbytes base hands x to lora_A
 * as it is and casts it once (fp32 -> bf16, 6 bytes per element: its fp32
 * input is the norm's output on the fp32 residual stream), and PEFT's
 * Linear4bit clones the base's fp32 output first (tuners/lora/bnb.py
 * "defensively clone": read and write 1024 x 512 x 4); that result is fp32
 * (bitsandbytes 0.50.2 Linear4bit's `.to(inp_dtype)`), so the add of the
 * bf16 adapter output promotes (bnb.py line 552: read 4 + 2, write 4, not
 * 2 + 2 + 2): 4 bytes more per element of k's output, so there 1024 x 2048
 * x 6 + 5,242,880 + 4,194,304 + 1024 x 512 x 4 = 24,117,248. */
START_TEST(test_adapter_input_copies_priced) {
    const double lora_k = 5.0 * 1024 * 512 * 2; /* scaling and add over k's output */
    const double want[2] = {1024.0 * 2048 * 12 + lora_k,
                            1024.0 * 2048 * 6 + lora_k + 2.0 * 1024 * 512 * 4 + 4.0 * 1024 * 512};
    for (int quant = 0; quant < 2; quant++) {
        est_run run = test_run_of("llama3.2-1b", "h200-141gb");
        run.framework = EST_FW_HF;
        run.quant = quant ? EST_QUANT_NF4 : EST_QUANT_NONE;
        run.lora.rank = 16;
        run.seq_len = 1024;
        run.stack = est_stack_find("2026-11-gpu");
        est_constants k;
        est_constants_defaults(&k);
        double bytes[2];
        for (int with_k = 0; with_k < 2; with_k++) {
            run.lora.targets = EST_LORA_BIT(EST_LORA_Q) | (with_k ? EST_LORA_BIT(EST_LORA_K) : 0);
            est_time_detail d;
            est_time_model(&run, &k, &d);
            ck_assert(d.modelled);
            bytes[with_k] = d.block_fwd.hbm_bytes;
        }
        ck_assert_msg(fabs(bytes[1] - bytes[0] - want[quant]) < 1, "quant %d: %.0f vs %.0f", quant,
                      bytes[1] - bytes[0], want[quant]);
    }
}
END_TEST

Suite *suite_quant(void);
Suite *suite_quant(void) {
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("quant");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_base_bytes_llama3_70b);
    tcase_add_test(tc, test_dequant_transient);
    tcase_add_test(tc, test_qlora_70b_fraction);
    tcase_add_test(tc, test_quant_bad_input);
    tcase_add_test(tc, test_fsdp_qlora);
    tcase_add_test(tc, test_h200_image_stack_gqa);
    tcase_add_test(tc, test_bnb_adapter_input_under_autocast);
    tcase_add_test(tc, test_int8_backward_in_input_dtype);
    tcase_add_test(tc, test_adapter_input_copies_priced);
    suite_add_tcase(s, tc);
    return s;
}
