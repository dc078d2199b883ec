/* Pins for the terms that `make mutation` (tests/mutation/edits.tsv) showed no
 * other test could tell apart from a wrong one. Every expected value is
 * derived here by hand from the shapes of tiny-llama (models/tiny-llama.json)
 * and the framework source cited beside it (the same citations as the
 * profiles, docs/method.md), never copied from the program's output.
 *
 * tiny-llama: vocabulary V 64, hidden h 32, MLP I 64, 2 blocks, 4 query heads
 * and 2 KV heads of 8, untied head, no biases. Per block: q 32x32 = 1024,
 * k and v 32x16 = 512 each, o 1024, gate, up and down 32x64 = 2048 each, two
 * RMSNorms 2x32 = 64: 9,280. Model: embedding 2048 + 2 x 9280 + final norm 32
 * + head 2048 = 22,688 = P (models/tiny-llama.json's hand count). The largest
 * tensor has 2048 elements. Runs: one sequence of s = 64 tokens (T = 64), SDPA
 * without a padding mask, AdamW, on an A100 80GB. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepspeed_estimator.h"
#include "estimate.h"
#include "hf_modeling.h"
#include "lora.h"
#include "test_util.h"

enum {
    P = 22688,       /* parameters */
    BLOCK = 9280,    /* one decoder block's parameters */
    HEAD = 2048,     /* the LM head (V x h) */
    LARGEST = 2048,  /* the largest tensor (embedding, head, gate, up, down) */
    T = 64,          /* tokens per micro-batch */
    H = 32,          /* hidden */
    I = 64,          /* MLP width */
    Q = 32,          /* query width, heads x head_dim */
};

static est_run tiny(est_framework fw, est_precision prec, int zero_stage, int64_t ranks) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load("tiny-llama", &m, err, sizeof err) == 0, "%s", err);
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    const est_gpu *g = est_gpu_find(&cat, "a100-80gb");
    ck_assert_ptr_nonnull(g);
    est_run run;
    est_run_defaults(&run, &m, g);
    est_gpu_catalog_free(&cat);
    run.framework = fw;
    run.precision = prec;
    run.zero_stage = zero_stage;
    run.gpus_per_node = ranks;
    run.seq_len = T;
    return run;
}

static const est_phase *moment(const est_estimate *e, const char *label) {
    for (size_t i = 0; i < e->tl.count; i++)
        if (!strcmp(e->tl.phases[i].label, label)) return &e->tl.phases[i];
    ck_abort_msg("no moment \"%s\"", label);
    return NULL;
}

/* The cuBLAS workspace is a measured constant (calibrate/profiles), not part
 * of what these pins derive: subtracted where a workspace term is pinned. */
static int64_t cublas(const est_estimate *e) {
    return (int64_t)e->k.value[EST_K_CUBLAS_WORKSPACE_BYTES];
}

/* ZeRO-1 (Rajbhandari et al. 2019, section 5.1; stage_1_and_2.py): the fp32
 * master and Adam's m and v are partitioned over the 4 ranks, n = ceil(P/4)
 * = 5672; the bf16 weights stay whole. Adam's state appears at the first
 * step, not at init (initialize_optimizer_states only attaches and drops a
 * zero gradient, 0.14.2 and 0.16.4): absent when the engine is initialized,
 * there from the shown step's first moment on. */
START_TEST(test_zero1_shards_optimizer_state) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 1, 4);
    est_estimate e;
    test_estimate(&run, &e);
    const est_phase *init = moment(&e, "engine initialized");
    ck_assert_int_eq(init->bytes[EST_CAT_MASTER], 4 * 5672);
    ck_assert_int_eq(init->bytes[EST_CAT_OPTIMIZER], 0);
    ck_assert_int_eq(moment(&e, "forward embedding")->bytes[EST_CAT_OPTIMIZER], 8 * 5672);
    ck_assert_int_eq(init->bytes[EST_CAT_PARAMS], 2 * P);
    est_estimate_free(&e);
}
END_TEST

/* Stages 1-2 with overlap_comm: true keep two reduce buckets (ipg_buffer[0]
 * and [1], stage_1_and_2.py) of reduce_bucket_size elements in the compute
 * dtype while gradients are reduced; without it one. Bucket of 1000 elements,
 * bf16: 2 x 1000 x 2 and 1000 x 2 bytes. */
START_TEST(test_overlap_comm_second_bucket) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 2, 4);
    run.ds.reduce_bucket_elems = 1000;
    run.ds.overlap_comm = true;
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "gradient reduction")->bytes[EST_CAT_COMM], 4000);
    run.ds.overlap_comm = false;
    est_estimate_free(&e);
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "gradient reduction")->bytes[EST_CAT_COMM], 2000);
    est_estimate_free(&e);
}
END_TEST

/* ZeRO-2 with the optimizer offloaded (stage_1_and_2.py, cpu_offload): the GPU
 * keeps no master or Adam state but a buffer of the largest parameter in the
 * compute dtype (temp_grad_buffer_for_gpu_offload, 2048 x 2); the host keeps,
 * per rank, the fp32 master (4n), m and v (8n), the fp32 gradient partition
 * (4n), n = 5672, and the pinned temp_grad_buffer_for_cpu_offload (2048 x 2). */
START_TEST(test_zero2_offload_buffers) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 2, 4);
    run.offload = EST_OFFLOAD_OPTIMIZER;
    est_estimate e;
    test_estimate(&run, &e);
    const est_phase *init = moment(&e, "engine initialized");
    ck_assert_int_eq(init->bytes[EST_CAT_MASTER], 0);
    ck_assert_int_eq(init->bytes[EST_CAT_OPTIMIZER], 0);
    ck_assert_int_eq(init->bytes[EST_CAT_WORKSPACE], 2 * LARGEST); /* no GEMM yet: no cuBLAS workspace */
    ck_assert_int_eq(e.cpu_bytes, 16 * 5672 + 2 * LARGEST);
    est_estimate_free(&e);
}
END_TEST

/* The optimizer step's gradient norm upcasts one gradient shard to fp64
 * (get_grad_norm_direct): the largest parameter's shard over 4 ranks, 512
 * elements x 8 bytes. */
START_TEST(test_grad_norm_in_fp64) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 3, 4);
    est_estimate e;
    test_estimate(&run, &e);
    const est_phase *norm = moment(&e, "optimizer: gradient norm (fp64)");
    /* two cuBLAS workspaces in the step: the forward's and the backward thread's */
    ck_assert_int_eq(norm->bytes[EST_CAT_WORKSPACE] - 2 * cublas(&e), 512 * 8);
    est_estimate_free(&e);
}
END_TEST

/* Loading at stages 0-2: from_pretrained's fp32 model (4P) and the engine's
 * module.half()/bfloat16() copy (2P) in every process (engine.py
 * _configure_distributed_model). */
START_TEST(test_host_load_stage2) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 2, 4);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(e.cpu_load_bytes, 4 * P + 2 * P);
    est_estimate_free(&e);
}
END_TEST

/* Full checkpointing under DeepSpeed bf16 (module cast, so the residual stream
 * is bf16): at the highest point of block i's forward (the SwiGLU activation
 * of the no-grad forward, when gate, up and act(gate) coexist: 3 x T x I x 2
 * = 24,576), the inputs of blocks 0..i kept by their checkpoints (T x h x 2 =
 * 4096 each), the residual stream after the attention, 4096, and the
 * model's RoPE cos and sin (transformers 4.49 LlamaModel.rotary_emb, once
 * per forward: 64 positions x 8 x 2 bytes each = 2048), which live until
 * block 0's backward. */
START_TEST(test_checkpointed_forward) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 0, 1);
    run.checkpointing = EST_CKPT_FULL;
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "forward layer 0")->bytes[EST_CAT_ACTIVATIONS], 4096 + 24576 + 4096 + 2048);
    ck_assert_int_eq(moment(&e, "forward layer 1")->bytes[EST_CAT_ACTIVATIONS], 2 * 4096 + 24576 + 4096 + 2048);
    est_estimate_free(&e);
}
END_TEST

/* HF Trainer without DeepSpeed runs mixed precision (bf16 or fp16) as
 * torch.autocast over fp32 weights: the embedding output, hence the residual
 * stream, is fp32 (T x h x 4 = 8192), and torch.utils.checkpoint keeps each
 * block's fp32 input (8192). With checkpointing, block i's forward holds the
 * inputs of blocks 0..i, the no-grad SwiGLU tensors in the autocast dtype
 * (3 x T x I x 2 = 24,576) and the fp32 stream after the attention.
 * The model's rotary module follows the fp32 hidden states: cos and sin
 * fp32 (64 x 8 x 4 = 2048 each), alive from the embedding on; its highest
 * point is the last product, sin = emb.sin() * attention_scaling, beside its
 * locals freqs (64 x 4 x 4 = 1024) and emb and the cos already made (2048
 * each): 8192 + 1024 + 4 x 2048. */
START_TEST(test_autocast_residual_is_fp32) {
    const est_precision precs[] = {EST_PREC_BF16_MIXED, EST_PREC_FP16_MIXED};
    for (size_t i = 0; i < 2; i++) {
        est_run run = tiny(EST_FW_HF, precs[i], 0, 1);
        run.checkpointing = EST_CKPT_FULL;
        est_estimate e;
        test_estimate(&run, &e);
        ck_assert_int_eq(moment(&e, "forward embedding")->bytes[EST_CAT_ACTIVATIONS], T * H * 4 + 1024 + 4 * 2048);
        ck_assert_int_eq(moment(&e, "forward layer 0")->bytes[EST_CAT_ACTIVATIONS], 8192 + 24576 + 8192 + 4096);
        ck_assert_int_eq(moment(&e, "forward layer 1")->bytes[EST_CAT_ACTIVATIONS],
                         2 * 8192 + 24576 + 8192 + 4096);
        ck_assert_int_eq(est_block_kept_bytes(&run), T * H * 4);
        est_estimate_free(&e);
    }
}
END_TEST

/* ZeRO-0 (FP16_Optimizer over autograd's gradients): gradients appear as each
 * block's backward runs. By the end of block i's backward: the head's (V x h
 * x 2 = 4096), the final norm's (32 x 2) and those of blocks L-1 down to i, i
 * included (9280 x 2 each). */
START_TEST(test_gradients_appear_in_backward) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 0, 1);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "backward layer 1")->own_max[EST_CAT_GRADS], 2 * HEAD + 2 * 32 + 2 * BLOCK);
    ck_assert_int_eq(moment(&e, "backward layer 0")->own_max[EST_CAT_GRADS], 2 * HEAD + 2 * 32 + 4 * BLOCK);
    est_estimate_free(&e);
}
END_TEST

/* The additive padding mask (b, 1, s, s) in the compute dtype
 * (_update_causal_mask, transformers 4.40): 64 x 64 x 2 bytes in bf16. */
START_TEST(test_padding_mask_dtype) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 0, 1);
    run.padding_mask = true;
    ck_assert_int_eq(est_model_saved_bytes(&run), 64 * 64 * 2);
}
END_TEST

/* A block's backward working set, bf16, SDPA: the residual gradient entering
 * and leaving (2 x T x h x 2 = 8192) plus the larger of the SwiGLU gradients
 * (3 x T x I x 2 = 24,576) and the attention gradients dQ, dK, dV with K and V
 * repeated to 4 heads (T x 3Q x 2 = 12,288). */
START_TEST(test_backward_working_set) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 0, 1);
    ck_assert_int_eq(est_block_backward_working(&run), 8192 + 24576);
    ck_assert_int_eq(3 * T * Q * 2, 12288);
}
END_TEST

/* fp32 training: 4-byte weights (IEEE 754 single precision), so the DeepSpeed
 * engine's module holds 4P. */
START_TEST(test_fp32_weights) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_FP32, 0, 1);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "engine initialized")->bytes[EST_CAT_PARAMS], 4 * P);
    est_estimate_free(&e);
}
END_TEST

/* DeepSpeed's estimators (deepspeed/runtime/zero/stage_1_and_2.py
 * estimate_zero2_model_states_mem_needs, stage3.py
 * estimate_zero3_model_states_mem_needs), Llama-3-8B (P = 8,030,261,248,
 * largest layer 128256 x 4096 = 525,336,576):
 *   zero2, 1 node x 8, no offload: 4P + int(16P/8) = 32,121,044,992 +
 *     16,060,522,496 = 48,181,567,488
 *   zero3, 2 nodes x 8, no offload: 4 x 525,336,576 + int(18P/16) =
 *     2,101,346,304 + 9,034,043,904 = 11,135,390,208 */
START_TEST(test_deepspeed_estimators_multi_gpu) {
    const int64_t p8 = 8030261248LL, largest = 525336576LL;
    ck_assert_int_eq(est_ds_zero2(p8, 8, 1, false).gpu_bytes, 48181567488LL);
    ck_assert_int_eq(est_ds_zero3(p8, largest, 8, 2, false, false, true).gpu_bytes, 11135390208LL);
}
END_TEST

/* HF DDP, 2 ranks, bf16 autocast over fp32 weights: at the all-reduce every
 * gradient is in param.grad and in its bucket (gradient_as_bucket_view=False,
 * torch/nn/parallel/distributed.py): 4P each; AdamW's exp_avg and exp_avg_sq
 * in fp32 (zeros_like(param)): 8P. */
START_TEST(test_ddp_buckets_and_adam_state) {
    est_run run = tiny(EST_FW_HF, EST_PREC_BF16_MIXED, 0, 2);
    est_estimate e;
    test_estimate(&run, &e);
    const est_phase *ar = moment(&e, "gradient all-reduce");
    ck_assert_int_eq(ar->bytes[EST_CAT_GRADS], 4 * P);
    ck_assert_int_eq(ar->bytes[EST_CAT_COMM], 4 * P);
    ck_assert_int_eq(ar->bytes[EST_CAT_OPTIMIZER], 8 * P);
    est_estimate_free(&e);
}
END_TEST

/* DDP's constructor broadcasts rank 0's module states before it builds its
 * buckets (torch/distributed/utils.py _sync_module_states; c10d comm.cpp
 * broadcast_coalesced): every parameter, frozen or not, flattened into one new
 * tensor per dtype bucket of up to 250 MiB, two buckets in flight. LoRA rank 4
 * on q and v, bf16 autocast: the frozen base in bf16, P x 2 = 45,376; the
 * adapters in fp32, per block q r x 32 + 32 x r = 256 and v r x 32 + 16 x r =
 * 192, two blocks 896 x 4 = 3,584. Both flats are in flight at once: 48,960,
 * more than DDP's gradient bucket of the adapters alone (3,584). */
START_TEST(test_ddp_set_up_broadcast) {
    est_run run = tiny(EST_FW_HF, EST_PREC_BF16_MIXED, 0, 2);
    run.lora.rank = 4;
    run.lora.alpha = 8;
    run.lora.targets = EST_LORA_DEFAULT_TARGETS;
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "training state")->own_max[EST_CAT_COMM], 2 * P + 896 * 4);
    est_estimate_free(&e);
    run.gpus_per_node = 1; /* no DDP, no broadcast, no bucket */
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "training state")->own_max[EST_CAT_COMM], 0);
    est_estimate_free(&e);
}
END_TEST

/* Pure bf16 LoRA on the HF Trainer (torchtune's way: --precision bf16
 * --lora-dtype bf16): the adapters stay bf16, so AdamW's exp_avg and
 * exp_avg_sq (zeros_like(param)) are 2 bytes each. LoRA rank 4 on q and v of
 * tiny-llama: 896 adapter elements (test_ddp_set_up_broadcast), state 2 x 896
 * x 2 = 3,584 bytes; with PEFT's default fp32 adapters 2 x 896 x 4 = 7,168. */
START_TEST(test_hf_lora_bf16_adapters) {
    est_run run = tiny(EST_FW_HF, EST_PREC_BF16, 0, 1);
    run.lora.rank = 4;
    run.lora.alpha = 8;
    run.lora.targets = EST_LORA_DEFAULT_TARGETS;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        run.lora.base_dtype = bf16;
        est_estimate e;
        test_estimate(&run, &e);
        ck_assert_int_eq(moment(&e, "forward embedding")->bytes[EST_CAT_OPTIMIZER], 2 * 896 * (bf16 ? 2 : 4));
        est_estimate_free(&e);
    }
}
END_TEST

/* HF Trainer with the model loaded in bf16 (pure bf16, no autocast): 2-byte
 * weights and gradients, and AdamW's state in the weights' dtype
 * (torch/optim/adamw.py: zeros_like(param)), 2 x 2P. */
START_TEST(test_hf_pure_bf16) {
    est_run run = tiny(EST_FW_HF, EST_PREC_BF16, 0, 1);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "model loaded")->bytes[EST_CAT_PARAMS], 2 * P);
    const est_phase *ar = moment(&e, "gradient all-reduce");
    ck_assert_int_eq(ar->bytes[EST_CAT_GRADS], 2 * P);
    ck_assert_int_eq(ar->bytes[EST_CAT_OPTIMIZER], 4 * P);
    est_estimate_free(&e);
}
END_TEST

/* FSDP1 FULL_SHARD, 4 ranks, MixedPrecision(param_dtype=bf16): the sharded
 * fp32 FlatParameter (4n, n = 5672) and AdamW's state in its dtype (8n); in a
 * block's forward its unsharded parameters in param_dtype (9280 x 2) beside
 * the root unit's (embedding, final norm, head: 4128 x 2), which stays
 * unsharded from its forward through its backward (_runtime_utils.py
 * _post_forward_reshard skips the root). */
START_TEST(test_fsdp_full_shard_dtypes) {
    est_run run = tiny(EST_FW_FSDP, EST_PREC_BF16_MIXED, 3, 4);
    est_estimate e;
    test_estimate(&run, &e);
    const est_phase *rs = moment(&e, "gradients reduce-scattered");
    ck_assert_int_eq(rs->bytes[EST_CAT_MASTER], 4 * 5672);
    ck_assert_int_eq(rs->bytes[EST_CAT_OPTIMIZER], 8 * 5672);
    ck_assert_int_eq(moment(&e, "forward layer 0")->bytes[EST_CAT_COMM], 2 * BLOCK + 2 * 4128);
    est_estimate_free(&e);
}
END_TEST

/* ZeRO-3 at 4 ranks (partitioned_param_coordinator.py, 0.14.2): every
 * tiny-llama parameter (2048 elements at most) is under
 * stage3_param_persistence_threshold (1e5 by default), so each stays whole on
 * every rank and nothing is ever gathered. With a threshold of 0 and no
 * prefetch, each submodule is gathered when it runs and, the whole model
 * being within stage3_max_reuse_distance (1e9 elements) of its next use, kept:
 * at the loss the whole model is gathered, 2 x P bytes beside the partition
 * (every dimension is a multiple of 4: no padding). */
START_TEST(test_zero3_gathers_and_prefetches) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 3, 4);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "loss")->bytes[EST_CAT_PARAMS] -
                         moment(&e, "engine initialized")->bytes[EST_CAT_PARAMS], 0);
    run.ds.persistence_elems = 0;
    run.ds.prefetch_bucket_elems = 0;
    est_estimate_free(&e);
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "loss")->bytes[EST_CAT_PARAMS] -
                         moment(&e, "engine initialized")->bytes[EST_CAT_PARAMS], 2 * P);
    est_estimate_free(&e);
}
END_TEST

/* A block's saved tensors, bf16 (DeepSpeed casts the module), SDPA, T = 64
 * (the derivation of tests/estimator.c's test_block_saved_qwen_sdpa):
 *   per token: two RMSNorms (fp32 input 4h + rsqrt 4 + normalized 2h = 196
 *     each) and their outputs (2h = 64 each): 520 x 64 tokens  = 33,280
 *   q, k and v repeated to 4 heads, the output: 4 x T x 32 x 2 = 16,384
 *   log-sum-exp, 4 heads x 64 rows x 4                         =  1,024
 *   SwiGLU gate, silu, up, product: 4 x T x 64 x 2             = 32,768
 * = 83,456 per block, and once for all blocks the model's RoPE cos and sin
 * (transformers 4.49: one rotary module per model), 64 positions x 8 x 2
 * bytes x 2 = 2,048, which every block's RoPE saves. The highest point of block i's backward (ZeRO-0, no
 * checkpointing) is the SwiGLU product's backward: blocks below i keep their
 * sets; block i's has lost the product (T x I x 2 = 8192, saved by down_proj
 * and released with its backward); live are the residual gradient coming in
 * (T x h x 2 = 4096), the product's gradient and the two it makes for
 * act(gate) and up (3 x T x I x 2 = 24,576). */
START_TEST(test_backward_activations) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 0, 1);
    est_estimate e;
    test_estimate(&run, &e);
    const int64_t block = 83456, rope = 2048, working = 4096 + 24576 - 8192;
    ck_assert_int_eq(moment(&e, "backward layer 1")->bytes[EST_CAT_ACTIVATIONS], block + block + rope + working);
    ck_assert_int_eq(moment(&e, "backward layer 0")->bytes[EST_CAT_ACTIVATIONS], block + rope + working);
    est_estimate_free(&e);
}
END_TEST

/* ZeRO-3's end of backward (stage3.py, comm/coalesced_collectives.py
 * reduce_scatter_coalesced): the filled part of the gradient bucket is
 * concatenated for the reduce-scatter, each gradient padded to a multiple of
 * the ranks: the whole model (2P; every tiny-llama tensor is a multiple of 4)
 * under the default 5e8-element bucket. With a 1000-element bucket a gradient
 * larger than the bucket stays autograd's tensor (stage3.py
 * __add_grad_to_ipg_bucket moves into the bucket only what fits) until the
 * next flush, where a lone gradient that divides by the ranks is reduced in
 * place: the last flush holds only the embedding's gradient (64 x 32 = 2048
 * elements), so the reduction concatenates nothing, and that gradient (2 x
 * 2048 bytes) is still live when it starts. Measured from the moment the
 * engine is initialized. */
START_TEST(test_zero3_reduce_scatter_copy) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 3, 4);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "gradient reduction")->own_max[EST_CAT_COMM] -
                         moment(&e, "engine initialized")->bytes[EST_CAT_COMM],
                     2 * P);
    run.ds.reduce_bucket_elems = 1000;
    /* On a fake process group no stream waits on another rank and nothing is
     * freed pending (seam_deepspeed_lag.c): what is live at the last flush is
     * then the flush's own tensors alone, as derived above. With real ranks
     * the two earlier flushes' gradients are still pending there (DeepSpeed's
     * throttle waits for the flush three before), which zero3.c derives. */
    run.ds.fake_group = true;
    est_estimate_free(&e);
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "gradient reduction")->own_max[EST_CAT_COMM] -
                         moment(&e, "engine initialized")->bytes[EST_CAT_COMM],
                     0);
    ck_assert_int_eq(moment(&e, "gradient reduction")->own_max[EST_CAT_GRADS] -
                         moment(&e, "engine initialized")->bytes[EST_CAT_GRADS],
                     2 * LARGEST);
    est_estimate_free(&e);
}
END_TEST

/* ZeRO-1 without overlap_comm (DeepSpeed's default below stage 3) registers
 * no gradient hooks (stage_1_and_2.py __init__: hooks only `if
 * self.partition_gradients or self.overlap_comm`, 0.14.2 and 0.16.4):
 * backward leaves every gradient as .grad, bf16, 2P = 45,376 bytes, all alive
 * when reduce_gradients starts taking them through the bucket. */
START_TEST(test_zero1_reduces_after_backward) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 1, 4);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "gradient reduction")->own_max[EST_CAT_GRADS], 2 * P);
    est_estimate_free(&e);
}
END_TEST

/* ZeRO-2 follows the rank asked for (est_run.rank; ftest check asks for each
 * traced rank). Two ranks split the flat bf16 buffer of P = 22,688 elements
 * (a multiple of 2 x 2, no padding) at 11,344. Registration order: the
 * embedding (2048), block 0 (9280), then block 1's q (1024) from 11,328. Rank
 * 0's grads_in_partition holds the parameters meeting [0, 11344): 2048 + 9280
 * + 1024 = 12,352 elements; rank 1's [11344, 22688): block 1 (9280), the
 * final norm (32) and the head (2048) = 11,360. In bf16 they differ by
 * (12,352 - 11,360) x 2 = 1,984 bytes, and nothing else of the step does. */
START_TEST(test_zero2_follows_the_rank_asked_for) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 2, 2);
    int64_t grads[2];
    for (int r = 0; r < 2; r++) {
        run.rank = r;
        est_estimate e;
        test_estimate(&run, &e);
        grads[r] = moment(&e, "optimizer: flatten + fp32 gradients")->own_max[EST_CAT_GRADS];
        est_estimate_free(&e);
    }
    ck_assert_int_eq(grads[0] - grads[1], (12352 - 11360) * 2);
}
END_TEST

/* DeepSpeed with torch's SGD (momentum 0, the default): no optimizer state
 * (torch/optim/sgd.py keeps momentum_buffer None), only the fp32 master
 * partition, 4n with n = 5672 at ZeRO-1 over 4 ranks. */
START_TEST(test_deepspeed_sgd_has_no_state) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 1, 4);
    run.optimizer = EST_OPT_SGD;
    est_estimate e;
    test_estimate(&run, &e);
    const est_phase *init = moment(&e, "engine initialized");
    ck_assert_int_eq(init->bytes[EST_CAT_OPTIMIZER], 0);
    ck_assert_int_eq(init->bytes[EST_CAT_MASTER], 4 * 5672);
    est_estimate_free(&e);
}
END_TEST

/* Fused linear cross-entropy (Liger-Kernel fused_linear_cross_entropy.py),
 * bf16, T = 64, V = 64, h = 32: chunks of T / ceil(V/h) = 32 rows (a power of
 * two), one chunk's logits in bf16 and fp32 (32 x 64 x 6 = 12,288), the
 * hidden-state gradient (64 x 32 x 2 = 4096) and the head's weight gradient
 * (64 x 32 x 2 = 4096) made whole in the forward; nothing left for backward. */
START_TEST(test_fused_loss_terms) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 0, 1);
    run.loss = EST_LOSS_CHUNKED;
    est_terms t;
    est_logits_forward(&run, &t);
    ck_assert_int_eq(t.total, 12288 + 4096 + 4096);
    est_logits_backward(&run, &t);
    ck_assert_int_eq(t.total, 0);
}
END_TEST

/* Eager attention, bf16: for a moment the scaled, masked scores
 * (QK^T/sqrt(d) + mask, b x heads x s x s in bf16) exist beside the softmax
 * output: 4 x 64 x 64 x 2 = 32,768 bytes. */
START_TEST(test_eager_scores_transient) {
    est_run run = tiny(EST_FW_DEEPSPEED, EST_PREC_BF16_MIXED, 0, 1);
    run.attention = EST_ATTN_EAGER;
    ck_assert_int_eq(est_block_forward_transient(&run), 4 * 64 * 64 * 2);
}
END_TEST

Suite *suite_mutation_pins(void);
Suite *suite_mutation_pins(void) {
    Suite *s = suite_create("mutation_pins");
    TCase *tc = tcase_create("terms");
    tcase_add_test(tc, test_zero1_shards_optimizer_state);
    tcase_add_test(tc, test_overlap_comm_second_bucket);
    tcase_add_test(tc, test_zero2_offload_buffers);
    tcase_add_test(tc, test_grad_norm_in_fp64);
    tcase_add_test(tc, test_host_load_stage2);
    tcase_add_test(tc, test_checkpointed_forward);
    tcase_add_test(tc, test_autocast_residual_is_fp32);
    tcase_add_test(tc, test_gradients_appear_in_backward);
    tcase_add_test(tc, test_padding_mask_dtype);
    tcase_add_test(tc, test_backward_working_set);
    tcase_add_test(tc, test_fp32_weights);
    tcase_add_test(tc, test_deepspeed_estimators_multi_gpu);
    tcase_add_test(tc, test_ddp_buckets_and_adam_state);
    tcase_add_test(tc, test_ddp_set_up_broadcast);
    tcase_add_test(tc, test_hf_lora_bf16_adapters);
    tcase_add_test(tc, test_zero1_reduces_after_backward);
    tcase_add_test(tc, test_zero2_follows_the_rank_asked_for);
    tcase_add_test(tc, test_hf_pure_bf16);
    tcase_add_test(tc, test_fsdp_full_shard_dtypes);
    tcase_add_test(tc, test_zero3_gathers_and_prefetches);
    tcase_add_test(tc, test_backward_activations);
    tcase_add_test(tc, test_zero3_reduce_scatter_copy);
    tcase_add_test(tc, test_deepspeed_sgd_has_no_state);
    tcase_add_test(tc, test_fused_loss_terms);
    tcase_add_test(tc, test_eager_scores_transient);
    suite_add_tcase(s, tc);
    return s;
}
