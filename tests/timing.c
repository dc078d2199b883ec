/* The step-time model against hand derivations written here (FLOPs of a tiny
 * Llama by the 6N + attention formula, ZeRO collective volumes from the ZeRO
 * paper section 7, the offload traffic of ZeRO-Offload), its bookkeeping
 * invariants (phase times add up to the step), the fit recovering constants
 * it was given, and the committed gpjt Qwen1.5-0.5B measurements: predicted
 * it/s within each record's tolerance (25%), per group median and max printed. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "estimate.h"
#include "fit.h"
#include "json_util.h"
#include "record.h"
#include "strategy.h"
#include "test_util.h"
#include "step_build.h"
#include "timing.h"

/* A Llama of 2 blocks, h 64, MLP 256, 4 heads of 16, vocabulary 1000, untied. */
static const char TINY[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":1000,"
    "\"hidden_size\":64,\"intermediate_size\":256,\"num_hidden_layers\":2,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"max_position_embeddings\":4096,"
    "\"tie_word_embeddings\":false,\"rms_norm_eps\":1e-5}";

/* A made-up GPU with round figures, so every expectation is easy arithmetic. */
static est_gpu round_gpu(void) {
    est_gpu g;
    memset(&g, 0, sizeof g);
    strcpy(g.name, "test-gpu");
    strcpy(g.display, "test GPU");
    g.memory_bytes = (int64_t)80 << 30;
    g.fp32_tflops = 50;
    g.tf32_tflops = 100;
    g.bf16_tflops = 200;
    g.fp16_tflops = 200;
    g.hbm_gb_per_s = 2000;
    g.nvlink_gb_per_s = 100;
    g.pcie_gb_per_s = 25;
    strcpy(g.arch, "ampere");
    g.sms = 100;
    g.matmul_ceiling_tflops = 160;
    return g;
}

static est_run tiny_run(void) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_parse(TINY, strlen(TINY), "tiny", &m, err, sizeof err) == 0, "%s", err);
    est_gpu g = round_gpu();
    est_run r;
    est_run_defaults(&r, &m, &g);
    r.micro_batch = 2;
    r.seq_len = 32;
    r.attention = EST_ATTN_FLASH;
    r.framework = EST_FW_DEEPSPEED;
    return r;
}

static est_constants defaults(void) {
    est_constants k;
    est_constants_defaults(&k);
    return k;
}

/* N_matmul by hand: per block q, k, v, o 4 x 64x64 = 16384 and gate, up,
 * down 3 x 64x256 = 49152, so 65536; two blocks 131072; the head 1000x64 =
 * 64000: 195072. Tokens per step 2 x 32 = 64. Model FLOPs = 64 x (6 x 195072
 * + 6 x L s q) = 64 x (1170432 + 6 x 2 x 32 x 64) = 64 x 1195008 = 76480512. */
START_TEST(test_model_flops_by_hand) {
    est_run r = tiny_run();
    est_constants k = defaults();
    est_time_detail t;
    est_time_model(&r, &k, &t);
    ck_assert(t.modelled);
    ck_assert_int_eq(t.matmul_params, 195072);
    ck_assert_close(t.model_flops, 76480512.0, 0, 1e-12);
    ck_assert_int_eq(t.tokens_per_step, 64);
    /* MFU is model FLOPs over the step at the bf16 peak. */
    ck_assert_close(t.mfu, t.model_flops / (t.step_s * 200e12), 0, 1e-12);
    ck_assert_close(t.it_per_s, 1 / t.step_s, 0, 1e-12);
    ck_assert_close(t.tokens_per_s, 64 / t.step_s, 0, 1e-12);
}
END_TEST

/* Executed FLOPs: block GEMMs 2 T sum(in x out) = 2 x 64 x 65536 = 8388608
 * forward, twice that backward; flash attention (causal) 4 b s^2 q / 2 =
 * 262144 forward and 2.5x backward = 655360; the head 2 x 64 x 64 x 1000 =
 * 8192000 forward, 16384000 backward. Two blocks:
 * 2 x (8388608 + 16777216 + 262144 + 655360) + 8192000 + 16384000 = 76742656.
 * Full recompute adds each block's forward once more (2 x 8650752), which is
 * executed work but not model FLOPs. */
START_TEST(test_executed_flops_and_recompute) {
    est_run r = tiny_run();
    est_constants k = defaults();
    est_time_detail t, tr;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.executed_flops, 76742656.0, 0, 1e-12);
    r.checkpointing = EST_CKPT_FULL;
    est_time_model(&r, &k, &tr);
    ck_assert_close(tr.executed_flops, 76742656.0 + 2 * 8650752.0, 0, 1e-12);
    ck_assert_close(tr.model_flops, t.model_flops, 0, 1e-12);
    ck_assert(tr.step_s > t.step_s);
    ck_assert(tr.mfu < t.mfu);
    /* An explicit padding mask makes SDPA compute the full square: +2 x 3.5 x 262144. */
    est_run p = tiny_run();
    p.attention = EST_ATTN_SDPA;
    p.padding_mask = true;
    est_time_model(&p, &k, &tr);
    ck_assert_close(tr.executed_flops, 76742656.0 + 2 * 3.5 * 262144.0, 0, 1e-12);
}
END_TEST

/* QLoRA: a 4-bit NF4 base is slower per step than the same LoRA on a bf16 base
 * by the dequantization traffic (docs/method.md, "QLoRA"): bitsandbytes
 * dequantizes each frozen weight of n elements in every forward and every
 * backward (bitsandbytes 0.50.2 functional.py dequantize_4bit): with double
 * quantization it first makes the absmax whole, dequantize_blockwise reading
 * one 8-bit code per block of 64 and writing it as fp32, then `absmax +=
 * offset` reading and writing those fp32 values (two kernels); then one
 * kernel reads the codes (n/2 bytes) and the fp32 absmax and writes n bf16
 * elements. Llama-3.2-1B (h 2048, q 2048, kv 512, MLP 8192, 16 blocks) at
 * batch 4 x 2048 on an A100 is device-bound, so per step the difference is
 * 16 blocks x 2 passes x that traffic at the achieved bandwidth, plus three
 * launch gaps per weight and pass. Under FSDP (one rank)
 * nothing else differs: sharded QLoRA keeps the bf16 residual stream (the HF
 * Trainer's single-GPU QLoRA casts the unquantized weights to fp32, which
 * changes its norms' traffic as well). */
START_TEST(test_qlora_dequantization_cost) {
    est_run r = test_run_of("llama3.2-1b", "a100-80gb");
    r.framework = EST_FW_FSDP;
    r.zero_stage = 3;
    r.precision = EST_PREC_BF16_MIXED;
    r.micro_batch = 4;
    r.seq_len = 2048;
    r.lora.rank = 16;
    r.lora.alpha = 32;
    r.lora.targets = (1u << 7) - 1; /* all seven linears */
    r.double_quant = true;
    est_constants k;
    est_constants_defaults(&k);
    est_time_detail bf16, nf4;
    est_time_model(&r, &k, &bf16);
    r.quant = EST_QUANT_NF4;
    est_time_model(&r, &k, &nf4);
    ck_assert(bf16.modelled && nf4.modelled);
    const double sizes[7][2] = {{2048, 2048}, {2048, 512}, {2048, 512}, {2048, 2048},
                                {2048, 8192}, {2048, 8192}, {8192, 2048}};
    double bytes = 0;
    for (int i = 0; i < 7; i++) {
        const double n = sizes[i][0] * sizes[i][1], blocks = ceil(n / 64);
        bytes += blocks * (1 + 4) + blocks * 4 * 2 + n / 2 + blocks * 4 + n * 2;
    }
    const double bw = 2039e9 * k.value[EST_K_HBM_EFF];
    const double want = 16 * 2 * (bytes / bw + 7 * 3 * k.value[EST_K_KERNEL_GPU_S]);
    ck_assert_msg(nf4.block_fwd.gpu_s > nf4.block_fwd.host_s, "not device-bound");
    ck_assert_close(nf4.step_s - bf16.step_s, want, 0, 1e-9);
    /* And under the HF Trainer the 4-bit base is slower too. */
    r.framework = EST_FW_HF;
    r.zero_stage = 0;
    est_time_model(&r, &k, &nf4);
    r.quant = EST_QUANT_NONE;
    est_time_model(&r, &k, &bf16);
    ck_assert(nf4.step_s > bf16.step_s);
}
END_TEST

/* The HF Trainer's QLoRA job of the two tests below: Llama-3.2-1B on one
 * H200, bf16 autocast, one row of 2048 tokens, r16 adapters, NF4 without
 * double quantization. */
static est_run qlora_1b_run(void) {
    est_run r = test_run_of("llama3.2-1b", "h200-141gb");
    r.framework = EST_FW_HF;
    r.precision = EST_PREC_BF16_MIXED;
    r.micro_batch = 1;
    r.seq_len = 2048;
    r.lora.rank = 16;
    r.lora.alpha = 32;
    r.quant = EST_QUANT_NF4;
    r.double_quant = false;
    return r;
}

/* Issue 23 (qloratime): the bytes of one 4-bit LoRA Linear, derived by hand
 * and isolated as the difference between adapting all seven Linears and all
 * but `up`, under the HF Trainer's QLoRA on one GPU (NF4, bf16 autocast,
 * prepare_model_for_kbit_training's fp32 norms: up's input x is fp32, a = 4;
 * c = 2; Llama-3.2-1B, h = 2048, f = 8192, T = 2048). Sources: bitsandbytes
 * 0.50.2 nn/modules.py Linear4bit.forward returns `.to(inp_dtype)` (fp32);
 * peft 0.21.2 tuners/lora/bnb.py Linear4bit.forward clones it (line 533)
 * and adds `lora_B(lora_A(x)) * scaling` (line 552) with lora_A's input left
 * to autocast; torch 2.11 casts the add's fp32 gradient to the bf16 input's
 * dtype before MulBackward0 (a TorchDispatchMode log of r32 + o16 * s).
 *  forward:  clone of the fp32 result (read, write: 8 T f), autocast's cast
 *            of x for lora_A (T h (4 + 2)), the scaling in bf16 (4 T f), the
 *            promoted add (read 4 and 2, write 4: 10 T f): 22 T f + 6 T h;
 *  backward: the cast's ToCopyBackward (6 T h), the adapter's input gradient
 *            added into x's in fp32 (12 T h), the add's gradient cast to bf16
 *            (6 T f), MulBackward0 (4 T f): 10 T f + 18 T h.
 * The adapter's GEMMs are priced as GEMMs, not in hbm_bytes; the
 * dequantization runs with or without the adapter. */
START_TEST(test_qlora_linear_bytes_by_hand) {
    est_run r = qlora_1b_run();
    est_constants k;
    est_constants_defaults(&k);
    est_time_detail all, no_up;
    r.lora.targets = (1u << 7) - 1;
    est_time_model(&r, &k, &all);
    r.lora.targets &= ~(1u << 5); /* up (model/lora.h EST_LORA_UP) */
    est_time_model(&r, &k, &no_up);
    ck_assert(all.modelled && no_up.modelled);
    const double T = 2048, h = 2048, f = 8192;
    ck_assert_close(all.block_fwd.hbm_bytes - no_up.block_fwd.hbm_bytes, 22 * T * f + 6 * T * h, 0, 1e-9);
    ck_assert_close(all.block_bwd.hbm_bytes - no_up.block_bwd.hbm_bytes, 10 * T * f + 18 * T * h, 0, 1e-9);
}
END_TEST

/* A frozen embedding runs no backward: autograd records EmbeddingBackward
 * only when the weight requires grad (the ids never do), so under LoRA the
 * "backward embedding" unit moves no byte, while a full fine-tune's dense
 * backward zeroes the V x h gradient and index-adds T rows (read the
 * gradient row, read and write the sum: 3 T h), and Llama-3.2-1B's tied head
 * adds its V x h gradient into the same .grad (read both, write: 3 V h).
 * Pure bf16 (g = 2 bytes), T = 2048, h = 2048, V = 128256. */
START_TEST(test_frozen_embedding_has_no_backward) {
    est_run r = test_run_of("llama3.2-1b", "h200-141gb");
    r.framework = EST_FW_HF;
    r.precision = EST_PREC_BF16;
    r.micro_batch = 1;
    r.seq_len = 2048;
    ck_assert(r.model.tied_embeddings);
    est_constants k;
    est_constants_defaults(&k);
    est_time_detail full, lora;
    est_time_model(&r, &k, &full);
    r.lora.rank = 16;
    r.lora.alpha = 32;
    est_time_model(&r, &k, &lora);
    ck_assert(full.modelled && lora.modelled);
    const double T = 2048, h = 2048, V = 128256, g = 2;
    ck_assert_close(full.embed_bwd.hbm_bytes, V * h * g + 3 * T * h * g + 3 * V * h * g, 0, 1e-9);
    ck_assert_close(lora.embed_bwd.hbm_bytes, 0, 0, 0);
    ck_assert(lora.embed_bwd.gpu_s < full.embed_bwd.gpu_s);
}
END_TEST

/* Issue 23 (qloratime): what the MLP's width costs a QLoRA block on the HF
 * Trainer's fp32 stream, by hand: Llama-3.2-1B at f = 8192 against f = 4096
 * (adapters on q, k, v, o only, so none on the MLP; NF4 without double
 * quantization; T = 2048, h = 2048, c = 2). bitsandbytes 0.50.2 returns each
 * Linear4bit's output in its input's dtype (nn/modules.py line 637): gate and
 * up read the fp32 norm output and return fp32, SwiGLU runs in fp32, down
 * reads the fp32 product. Per unit of f:
 *  forward:  three weights dequantized (h (1/2 + 4/64 + 2) each), gate's,
 *            up's and down's input and output casts (4 + 2 each way:
 *            3 x 6 T), silu and the product in fp32 (2 x 4 + 3 x 4 = 20 T);
 *  backward: the three weights again, the casts' ToCopyBackward (18 T), the
 *            product's two gradients and silu_backward (3 x 3 x 4 = 36 T). */
START_TEST(test_qlora_mlp_width_bytes_by_hand) {
    est_run r = qlora_1b_run();
    r.lora.targets = (1u << 4) - 1; /* q, k, v, o (model/lora.h) */
    est_constants k;
    est_constants_defaults(&k);
    est_time_detail wide, narrow;
    ck_assert_int_eq(r.model.intermediate_size, 8192);
    est_time_model(&r, &k, &wide);
    r.model.intermediate_size = 4096;
    est_time_model(&r, &k, &narrow);
    ck_assert(wide.modelled && narrow.modelled);
    const double T = 2048, h = 2048, df = 4096, deq = 3 * h * (0.5 + 4.0 / 64 + 2);
    ck_assert_close(wide.block_fwd.hbm_bytes - narrow.block_fwd.hbm_bytes, df * (18 * T + 20 * T + deq), 0, 1e-9);
    ck_assert_close(wide.block_bwd.hbm_bytes - narrow.block_bwd.hbm_bytes, df * (18 * T + 36 * T + deq), 0, 1e-9);
}
END_TEST

/* Issue 23: for the same job an A100 80GB (the 40GB's chip and ceiling, more
 * bandwidth) is never slower than a 40GB, and an H100 SXM over an A100 80GB
 * gains no more than the largest of its measured ceiling ratio (794.5 /
 * 271.2), HBM ratio (3350 / 2039) and NVLink ratio (450 / 300); over the jobs
 * of the example (Llama-3-8B, 8 GPUs, ZeRO-3, full checkpointing, seq
 * 2048), one GPU at ZeRO-0, and LoRA. */
START_TEST(test_gpu_orderings_per_job) {
    est_constants k;
    char err[256];
    const double bound = fmax(794.5 / 271.2, fmax(3350.0 / 2039.0, 450.0 / 300.0));
    const struct { int gpus, zero; est_checkpointing ckpt; int64_t rank; } jobs[] = {
        {8, 3, EST_CKPT_FULL, 0}, {1, 0, EST_CKPT_FULL, 0}, {1, 0, EST_CKPT_NONE, 16}, {8, 2, EST_CKPT_NONE, 0}};
    for (size_t j = 0; j < sizeof jobs / sizeof jobs[0]; j++) {
        double t[3];
        const char *gpus[3] = {"a100-40gb", "a100-80gb", "h100-80gb"};
        for (int g = 0; g < 3; g++) {
            est_run r = test_run_of("llama3-8b", gpus[g]);
            r.framework = EST_FW_DEEPSPEED;
            r.precision = EST_PREC_BF16_MIXED;
            r.gpus_per_node = jobs[j].gpus;
            r.zero_stage = jobs[j].zero;
            r.checkpointing = jobs[j].ckpt;
            r.seq_len = 2048;
            if (jobs[j].rank) {
                r.framework = EST_FW_HF;
                r.lora.rank = jobs[j].rank;
                r.lora.alpha = 16;
                r.lora.targets = (1u << 7) - 1;
            }
            ck_assert_msg(est_constants_for(est_framework_name(r.framework), r.gpu.name, &k, err, sizeof err) == 0, "%s", err);
            est_time_detail d;
            est_time_model(&r, &k, &d);
            ck_assert(d.modelled);
            t[g] = d.step_s;
        }
        ck_assert_msg(t[1] <= t[0], "job %zu: A100 80GB %.3f s, 40GB %.3f s", j, t[1], t[0]);
        ck_assert_msg(t[2] <= t[1] && t[1] / t[2] <= bound, "job %zu: H100 %.3f s, A100 %.3f s", j, t[2], t[1]);
    }
}
END_TEST

/* Every path has a time: LoRA and QLoRA under FSDP, mixture-of-experts models
 * (the experts by their tokens), LoRA under DeepSpeed. */
START_TEST(test_every_path_has_a_time) {
    est_constants k;
    est_constants_defaults(&k);
    est_time_detail t;
    est_run r = test_run_of("llama3-8b", "a100-80gb");
    r.framework = EST_FW_FSDP;
    r.zero_stage = 3;
    r.gpus_per_node = 2;
    r.precision = EST_PREC_BF16_MIXED;
    r.lora.rank = 16;
    r.lora.alpha = 16;
    r.lora.targets = (1u << 7) - 1;
    est_time_model(&r, &k, &t);
    ck_assert(t.modelled && t.step_s > 0);
    const double lora_bytes = t.comm_bytes;
    r.quant = EST_QUANT_NF4;
    est_time_model(&r, &k, &t);
    ck_assert(t.modelled && t.step_s > 0);
    ck_assert(t.comm_bytes < lora_bytes); /* the 4-bit base is gathered as stored */
    const char *moe[] = {"mixtral-8x7b", "qwen1.5-moe-a2.7b"};
    for (int i = 0; i < 2; i++) {
        est_run m = test_run_of(moe[i], "h100-80gb");
        m.gpus_per_node = 8;
        m.zero_stage = 3;
        est_time_model(&m, &k, &t);
        ck_assert_msg(t.modelled && t.step_s > 0 && t.mfu > 0 && t.mfu < 1, "%s", moe[i]);
    }
}
END_TEST

/* ZeRO paper section 7: stages 0-2 move 2 Psi per step, stage 3 3 Psi; a
 * ring sends (W-1)/W of it per rank. Psi = P = 259392 parameters here (V h
 * twice, 2 x (4 h^2 + 3 h f + 2 h), h), 2 bytes each in bf16. NCCL's latency
 * (src/graph/tuning.cc, Ring/Simple) adds to each ring pass of a bucket: here
 * one bucket, 8.4 us + 7 NVLink steps x 3.4 us; across 2 nodes of 4, 8.4 + 6
 * x 3.4 + 1 network step x 14 us. */
START_TEST(test_zero_volumes) {
    const double P = 259392, f = 7.0 / 8.0;
    est_constants k = defaults();
    est_time_detail t;
    est_run r = tiny_run();
    r.gpus_per_node = 8;
    for (int stage = 0; stage <= 3; stage++) {
        r.zero_stage = stage;
        est_time_model(&r, &k, &t);
        double want = (stage == 3 ? 3 : 2) * f * P * 2;
        ck_assert_msg(fabs(t.comm_bytes - want) < 1e-6, "stage %d: %g vs %g", stage, t.comm_bytes, want);
        /* Over NVLink at the NCCL bus efficiency; ZeRO-3's per-submodule
         * collectives at their own link share (zero3_comm_efficiency). */
        const double eff = k.value[stage == 3 ? EST_K_ZERO3_COMM_EFF : EST_K_NCCL_BUS_EFF];
        ck_assert_close(t.comm_s, want / (100e9 * eff) + (8.4 + 7 * 3.4) * 1e-6, 0, 1e-12);
    }
    /* Stage 2 reduce-scatters every micro-batch: (GA + 1) Psi with accumulation. */
    r.zero_stage = 2;
    r.grad_accum = 4;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.comm_bytes, 5 * f * P * 2, 0, 1e-12);
    /* Stage 3 gathers and reduces every micro-batch: 3 Psi x GA. */
    r.zero_stage = 3;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.comm_bytes, 4 * 3 * f * P * 2, 0, 1e-12);
    /* DDP under autocast all-reduces fp32 gradients once per step. */
    r.framework = EST_FW_HF;
    r.zero_stage = 0;
    r.grad_accum = 1;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.comm_bytes, 2 * f * P * 4, 0, 1e-12);
    /* Across two nodes the slower link bounds the ring: 25 GB/s < 100 GB/s NVLink. */
    r.framework = EST_FW_DEEPSPEED;
    r.zero_stage = 1;
    r.gpus_per_node = 4;
    r.nodes = 2;
    r.inter_node_gb_per_s = 25;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.comm_s, 2 * f * P * 2 / (25e9 * k.value[EST_K_NCCL_BUS_EFF]) + (8.4 + 6 * 3.4 + 14) * 1e-6,
                    0, 1e-12);
    /* overlap_comm in a DeepSpeed config hides the stage-2 reduce-scatter behind
     * backward; the all-gather of the weights after the step stays exposed. */
    r.nodes = 1;
    r.gpus_per_node = 8;
    r.zero_stage = 2;
    r.micro_batch = 64;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.comm_exposed_s, t.comm_s, 0, 1e-12);
    r.ds.overlap_comm = true;
    est_time_detail o;
    est_time_model(&r, &k, &o);
    ck_assert_close(o.comm_s, t.comm_s, 0, 1e-12);
    ck_assert_close(o.comm_exposed_s, f * P * 2 / (100e9 * k.value[EST_K_NCCL_BUS_EFF]), 0, 1e-9);
    r.ds.overlap_comm = false;
    r.micro_batch = 2;
    /* One GPU: nothing to communicate. */
    r.gpus_per_node = 1;
    r.nodes = 1;
    est_time_model(&r, &k, &t);
    ck_assert(t.comm_bytes == 0 && t.comm_s == 0);
}
END_TEST

/* ZeRO-Offload: bf16 gradients down every micro-batch, bf16 parameters up
 * once per step; DeepSpeedCPUAdam reads p, g, m, v (16 B), writes p, m, v
 * (12 B) and the bf16 copy (2 B), plus the norm (4 B): 34 B per parameter. */
/* DeepSpeed ZeRO-2 with offload_optimizer (stage_1_and_2.py v0.14.2): per
 * parameter the fp32 gradient goes down (4) and the fp32 partition up (4);
 * the host streams 44 bytes (the unscale 8, DeepSpeedCPUAdam 28, the two
 * copies' DMA 8); with accumulation each extra micro-batch moves its 16-bit
 * gradient once more each way (2 x 2). One rank on the made-up GPU's PCIe
 * (25 GB/s, no sharing), the host the default share of one GPU: 51.2 GB/s at
 * host_memory_efficiency, or 16 cores at DeepSpeedCPUAdam's rate per core,
 * the smaller. Eight ranks on an NVLink board share a PCIe switch by two and
 * the host by eight, with the oversubscription of their OpenMP teams. */
START_TEST(test_offload_traffic) {
    const double P = 259392;
    est_constants k = defaults();
    est_run r = tiny_run();
    r.zero_stage = 2;
    r.offload = EST_OFFLOAD_OPTIMIZER;
    est_time_detail t;
    est_time_model(&r, &k, &t);
    const double host = fmin(51.2e9 * k.value[EST_K_HOST_MEM_EFF], 16 * k.value[EST_K_CPU_ADAM_CORE_BYTES_PER_S]);
    ck_assert_close(t.pcie_bytes, 8 * P, 0, 1e-12);
    ck_assert_close(t.pcie_s, 8 * P / (25e9 * k.value[EST_K_PCIE_EFF]), 0, 1e-12);
    ck_assert_close(t.cpu_optimizer_s, P * 44 / host, 0, 1e-12);
    ck_assert(t.optimizer_s == 0);
    r.grad_accum = 3;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.pcie_bytes, 8 * P + 2 * 4 * P, 0, 1e-12);
    ck_assert_close(t.cpu_optimizer_s, P * (44 + 2 * 4) / host, 0, 1e-12);
    /* 8 ranks: each steps its eighth, all at once on one host of 8 GPU shares. */
    r.grad_accum = 1;
    r.gpus_per_node = 8;
    est_time_model(&r, &k, &t);
    const double n = ceil(P / 8), contention = 1 + k.value[EST_K_CPU_OPTIM_OVERSUBSCRIPTION];
    ck_assert_close(t.pcie_s, 8 * n / (25e9 * k.value[EST_K_PCIE_EFF] / 2), 0, 1e-12);
    ck_assert_close(t.cpu_optimizer_s, 8 * n * 44 / (8 * host / contention), 0, 1e-12);
}
END_TEST

/* Training moves in whole steps: with 2e6 tokens a step of 2 s, one token
 * takes a whole step, 3e6 tokens two steps, 1e9 tokens 500 steps. */
START_TEST(test_hours_in_whole_steps) {
    est_estimate e;
    memset(&e, 0, sizeof e);
    e.tokens_per_s = 1e6;
    e.step_time_s = 2;
    ck_assert_close(est_hours_for_tokens(&e, 1), 2.0 / 3600, 0, 1e-12);
    ck_assert_close(est_hours_for_tokens(&e, 3e6), 4.0 / 3600, 0, 1e-12);
    ck_assert_close(est_hours_for_tokens(&e, 1e9), 1000.0 / 3600, 0, 1e-12);
}
END_TEST

/* DeepSpeed ZeRO-3 at 8 ranks (v0.14.2): each unit waits for the all-gather
 * of its module's parameters and, in backward, the reduce-scatter of their
 * gradients, each rank receiving / sending 7/8 of the tensor in bf16 (2 B)
 * over NVLink (100 GB/s here) at zero3_comm_efficiency.
 * By hand for the tiny Llama: a block has 4 x 64 x 64 + 3 x 64 x 256 = 65536
 * weights and two norms of 64, 65664 parameters; embedding and head 64000
 * each. Persistence threshold 0 (nothing stays whole): forward gathers 65664
 * per block, backward gathers 65664 and reduces 65664; the head stays gathered
 * from its forward to its backward (its reuse is within
 * stage3_max_reuse_distance), so its backward only reduces; under full
 * checkpointing each block is gathered once more for its recompute. The default threshold
 * 1e5 keeps every one of these tensors whole (all <= 1e5 elements): no
 * gathers, the reduce-scatter stays. */
START_TEST(test_zero3_lanes_by_hand) {
    est_constants k = defaults();
    k.value[EST_K_ZERO3_COMM_EFF] = 0.5;
    k.value[EST_K_COMM_INTERFERENCE] = 0; /* the sums below leave the compute unslowed */
    const double per_elem = 7.0 / 8.0 * 2 / (100e9 * 0.5);
    est_run r = tiny_run();
    r.zero_stage = 3;
    r.gpus_per_node = 8;
    r.ds.persistence_elems = 0;
    est_time_detail t;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.block_fwd.comm_s, 65664 * per_elem, 0, 1e-12);
    ck_assert_close(t.block_bwd.comm_s, 2 * 65664 * per_elem, 0, 1e-12);
    ck_assert_close(t.embed_fwd.comm_s, 64000 * per_elem, 0, 1e-12);
    ck_assert_close(t.embed_bwd.comm_s, 2 * 64000 * per_elem, 0, 1e-12);
    ck_assert_close(t.head_fwd.comm_s, 64000 * per_elem, 0, 1e-12);
    ck_assert_close(t.head_bwd.comm_s, 64000 * per_elem, 0, 1e-12);
    ck_assert(t.loss_bwd.comm_s == 0);
    r.checkpointing = EST_CKPT_FULL;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.block_bwd.comm_s, 3 * 65664 * per_elem, 0, 1e-12);
    r.checkpointing = EST_CKPT_NONE;
    est_time_model(&r, &k, &t);
    /* The collectives are in the units, not again after them. */
    ck_assert(t.comm_exposed_s == 0);
    /* A unit takes its longest lane: with the link slowed a thousandfold the
     * collectives set every unit, and the micro-batch is their sum plus the
     * loss's device time and the issue of the embedding's one kernel (the
     * device starts when the host has issued it; after that the host is far
     * ahead and its issue time hides behind the lanes). */
    k.value[EST_K_ZERO3_COMM_EFF] = 0.5e-3;
    est_time_model(&r, &k, &t);
    double lanes = 1000 * per_elem * (2 * (3 * 65664) + 3 * 64000 + 2 * 64000);
    ck_assert(t.embed_fwd.kernels == 1);
    ck_assert_close(t.microbatch_s, lanes + t.loss_bwd.gpu_s + k.value[EST_K_KERNEL_HOST_S], 0, 1e-9);
    ck_assert_close(t.step_s, t.microbatch_s + t.optimizer_s, 0, 1e-12);
    k.value[EST_K_ZERO3_COMM_EFF] = 0.5;
    /* Without NVLink the collectives cross PCIe (25 GB/s here, a quarter of
     * the 100 GB/s NVLink); across two nodes the network per node (10 GB/s). */
    r.gpu.nvlink_gb_per_s = 0;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.block_fwd.comm_s, 4 * 65664 * per_elem, 0, 1e-12);
    r.gpu.nvlink_gb_per_s = 100;
    r.gpus_per_node = 4;
    r.nodes = 2;
    r.inter_node_gb_per_s = 10;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.block_fwd.comm_s, 10 * 65664 * per_elem, 0, 1e-12);
    r.gpus_per_node = 8;
    r.nodes = 1;
    /* A tensor of exactly the threshold stays whole (ds_numel <= threshold):
     * at 4096 the four 64 x 64 attention projections and the norms persist,
     * the three 64 x 256 MLP weights (16384 each) are gathered. */
    r.ds.persistence_elems = 4096;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.block_fwd.comm_s, 3 * 16384 * per_elem, 0, 1e-12);
    ck_assert_close(t.block_bwd.comm_s, (3 * 16384 + 65664) * per_elem, 0, 1e-12);
    /* Default persistence (1e5 elements): nothing to gather, gradients still reduced. */
    r.ds.persistence_elems = EST_DS_UNSET;
    est_time_model(&r, &k, &t);
    ck_assert(t.block_fwd.comm_s == 0 && t.embed_fwd.comm_s == 0 && t.head_fwd.comm_s == 0);
    ck_assert_close(t.block_bwd.comm_s, 65664 * per_elem, 0, 1e-12);
    ck_assert_close(t.embed_bwd.comm_s, 64000 * per_elem, 0, 1e-12);
    /* No prefetch (stage3_prefetch_bucket_size 0): the compute waits for each
     * gather, which joins the device time; the reduce-scatter stays beside. */
    r.ds.persistence_elems = 0;
    est_time_detail pre;
    est_time_model(&r, &k, &pre);
    r.ds.prefetch_bucket_elems = 0;
    est_time_model(&r, &k, &t);
    ck_assert(t.block_fwd.comm_s == 0);
    ck_assert_close(t.block_fwd.gpu_s, pre.block_fwd.gpu_s + 65664 * per_elem, 0, 1e-12);
    ck_assert_close(t.block_bwd.comm_s, 65664 * per_elem, 0, 1e-12);
    /* One rank, another stage or another framework: no lanes. */
    r.ds.prefetch_bucket_elems = EST_DS_UNSET;
    r.gpus_per_node = 1;
    est_time_model(&r, &k, &t);
    ck_assert(t.block_fwd.comm_s == 0 && t.block_bwd.comm_s == 0 && t.comm_bound_s == 0);
    r.gpus_per_node = 8;
    r.zero_stage = 2;
    est_time_model(&r, &k, &t);
    ck_assert(t.block_bwd.comm_s == 0);
    r.zero_stage = 3;
    r.framework = EST_FW_FSDP;
    est_time_model(&r, &k, &t);
    ck_assert(t.block_bwd.comm_s == 0);
}
END_TEST

/* The micro-batch as a host-to-device pipeline (est_pipeline_unit_s, docs/
 * method.md "The host runs ahead"), by hand on four units of four kernels
 * each, alternating host-bound (host 2, device 1) and device-bound (host 1,
 * device 2). The host has issued them by 2, 3, 5, 6. The device finishes a
 * unit after the one before it plus its own time, and no earlier than its
 * last kernel is issued plus that kernel's run (a quarter of the unit):
 *   1: max(0 + 1, 2 + 1/4) = 2.25     2: max(2.25 + 2, 3 + 2/4) = 4.25
 *   3: max(4.25 + 1, 5 + 1/4) = 5.25  4: max(5.25 + 2, 6 + 2/4) = 7.25
 * The sum of each unit's slower side (the host waiting for every unit)
 * would be 8, the larger of the two sums 6. A unit whose collectives
 * outlast its compute holds the device for them. */
START_TEST(test_host_runs_ahead_by_hand) {
    const double host[4] = {2, 1, 2, 1}, dev[4] = {1, 2, 1, 2}, want[4] = {2.25, 4.25, 5.25, 7.25};
    double host_done = 0, dev_done = 0;
    for (int i = 0; i < 4; i++) {
        est_time_part p = {.kernels = 4, .gpu_s = dev[i], .host_s = host[i]};
        dev_done = est_pipeline_unit_s(&host_done, dev_done, &p);
        ck_assert_close(dev_done, want[i], 0, 1e-12);
    }
    ck_assert_close(host_done, 6, 0, 1e-12);
    est_time_part lane = {.kernels = 2, .gpu_s = 1, .comm_s = 3, .host_s = 0};
    ck_assert_close(est_pipeline_unit_s(&host_done, 7.25, &lane), 10.25, 0, 1e-12);
}
END_TEST

/* The same through the ledger, on the tiny Llama under ZeRO-3 at 8 ranks
 * with the link slowed a thousandfold, so that each unit's device time is
 * its collectives, derived in test_zero3_lanes_by_hand: c = 65664 elements
 * per block and direction (2c in backward), e = 64000 for the embedding
 * (2e in backward) and the head, at p seconds per element. Kernel launches
 * cost the host nothing here, and the framework's host time per block is
 * 3c, half in each direction: 1.5c per block unit. The host has issued
 * embed, block 1, block 2 of the forward at 0, 1.5c, 3c, and the backward's
 * blocks at 4.5c, 6c. The device: embed e; block 1 max(e + c, 1.5c + c/k)
 * = e + c (k, the block's forward kernels, is above 2); block 2
 * max(e + 2c, 3c + c/k) = 3c + c/k (e < c: the host sets it); then head e,
 * loss l (its compute), head backward e, blocks 2c each (the host, at 4.5c
 * and 6c, is behind), embedding 2e: 7c + 4e + c/k + l. Each unit's slower
 * side summed would be 7c + 5e + l. */
START_TEST(test_host_runs_ahead_through_the_ledger) {
    est_constants k = defaults();
    const double p = 1000 * 7.0 / 8.0 * 2 / (100e9 * 0.5);
    const double c = 65664 * p, e = 64000 * p;
    k.value[EST_K_ZERO3_COMM_EFF] = 0.5e-3;
    k.value[EST_K_KERNEL_HOST_S] = 0;
    k.value[EST_K_FRAMEWORK_LAYER_HOST_S] = 3 * c;
    est_run r = tiny_run();
    r.zero_stage = 3;
    r.gpus_per_node = 8;
    r.ds.persistence_elems = 0;
    est_time_detail t;
    est_time_model(&r, &k, &t);
    ck_assert_close(t.block_fwd.comm_s, c, 0, 1e-12);
    ck_assert_close(t.block_fwd.host_s, 1.5 * c, 0, 1e-12);
    ck_assert(t.block_fwd.kernels > 2 && t.loss_bwd.comm_s == 0);
    const double want = 7 * c + 4 * e + c / t.block_fwd.kernels + t.loss_bwd.gpu_s;
    ck_assert_close(t.microbatch_s, want, 0, 1e-9);
}
END_TEST

/* The shape sets the efficiency: a micro-batch of one 1-token sequence runs
 * far below peak, a long sequence close to the matmul ceiling (160 of 200). */
START_TEST(test_small_matrices_run_slow) {
    est_constants k = defaults();
    est_run r = tiny_run();
    est_time_detail small, big;
    r.micro_batch = 1;
    r.seq_len = 1;
    est_time_model(&r, &k, &small);
    r.seq_len = 4096;
    r.micro_batch = 4;
    est_time_model(&r, &k, &big);
    double eff_small = small.block_fwd.flops / small.block_fwd.gpu_s / 200e12;
    double eff_big = big.block_fwd.flops / big.block_fwd.gpu_s / 200e12;
    ck_assert_msg(eff_small < 0.01 && eff_big > 0.1 && eff_big < 160.0 / 200,
                  "efficiency %g at 1 token, %g at 16384", eff_small, eff_big);
    /* Throughput grows with the micro-batch. */
    double prev = 0;
    for (int64_t b = 1; b <= 64; b *= 2) {
        est_time_detail t;
        r.micro_batch = b;
        r.seq_len = 128;
        est_time_model(&r, &k, &t);
        ck_assert_msg(t.tokens_per_s > prev, "tokens/s fell at batch %lld", (long long)b);
        prev = t.tokens_per_s;
    }
}
END_TEST

/* Forward, loss and backward phases hold one micro-batch; grad_accum of
 * those plus reduce and optimizer is the step, for every framework. */
START_TEST(test_phase_times_add_up) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    ft_model m;
    ck_assert_msg(ft_model_load("llama3.2-1b", &m, err, sizeof err) == 0, "%s", err);
    est_estimate e;
    est_estimate_init(&e);
    const est_framework fws[] = {EST_FW_HF, EST_FW_DEEPSPEED, EST_FW_FSDP, EST_FW_FTRAIN};
    for (size_t f = 0; f < 4; f++)
        for (int ga = 1; ga <= 3; ga += 2) {
            est_run r;
            est_run_defaults(&r, &m, est_gpu_find(&cat, "h100-80gb"));
            r.framework = fws[f];
            r.gpus_per_node = 4;
            r.zero_stage = fws[f] == EST_FW_HF ? 0 : fws[f] == EST_FW_FSDP ? 2 : 3;
            r.grad_accum = ga;
            if (fws[f] == EST_FW_FTRAIN) r.attention = EST_ATTN_FLASH;
            ck_assert_msg(est_estimate_run(&r, &e, err, sizeof err) == 0, "%s", err);
            double sum = 0;
            for (size_t i = 0; i < e.tl.count; i++) {
                const est_phase *p = &e.tl.phases[i];
                bool micro = p->kind == EST_PHASE_FORWARD || p->kind == EST_PHASE_LOSS ||
                             p->kind == EST_PHASE_BACKWARD;
                sum += (micro ? ga : 1) * p->time_s;
            }
            ck_assert_msg(e.step_time_s > 0 && fabs(sum - e.step_time_s) <= 1e-9 * e.step_time_s,
                          "%s GA %d: phases %.9g s, step %.9g s", est_framework_name(fws[f]), ga,
                          sum, e.step_time_s);
        }
    est_estimate_free(&e);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* The recommendation is the fastest alternative that fits. */
START_TEST(test_recommend_fastest_that_fits) {
    est_alternative a[4];
    memset(a, 0, sizeof a);
    for (int i = 0; i < 4; i++) a[i].valid = true;
    a[0].fits = false, a[0].step_time_s = 0.1; /* fastest, but does not fit */
    a[1].fits = true, a[1].step_time_s = 0.5;
    a[2].fits = true, a[2].step_time_s = 0.3;
    a[3].fits = true, a[3].step_time_s = 0.4;
    ck_assert_int_eq(est_recommend(a, 4), 2);
    a[2].valid = false;
    ck_assert_int_eq(est_recommend(a, 4), 3);
    for (int i = 0; i < 4; i++) a[i].fits = false;
    ck_assert_int_eq(est_recommend(a, 4), -1);
}
END_TEST

/* ftest fit recovers the time constants from records the model itself made
 * with known constants (runs of a sequence sweep and offloaded batches). */
START_TEST(test_fit_recovers_constants) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    ft_model m;
    ck_assert_msg(ft_model_load("qwen1.5-0.5b", &m, err, sizeof err) == 0, "%s", err);
    est_constants truth = defaults();
    truth.value[EST_K_FRAMEWORK_LAYER_HOST_S] = 0.0021;
    truth.value[EST_K_HOST_MEM_EFF] = 0.45;
    enum { N = 40 };
    est_record recs[N];
    const est_record *ptrs[N];
    memset(recs, 0, sizeof recs);
    for (int i = 0; i < N; i++) {
        est_run_defaults(&recs[i].run, &m, est_gpu_find(&cat, "rtx3090-24gb"));
        recs[i].run.precision = EST_PREC_FP16_MIXED;
        recs[i].run.zero_stage = 3;
        if (i < 32) {
            recs[i].run.seq_len = 64 * (i + 1);
        } else {
            recs[i].run.zero_stage = 2;
            recs[i].run.offload = EST_OFFLOAD_OPTIMIZER;
            recs[i].run.checkpointing = EST_CKPT_FULL;
            recs[i].run.micro_batch = i - 31;
        }
        est_time_detail t;
        est_time_model(&recs[i].run, &truth, &t);
        recs[i].it_per_s = t.it_per_s;
        ptrs[i] = &recs[i];
    }
    cJSON *sec = cJSON_CreateObject();
    /* Time constants are fitted over all GPUs together; a GPU's own group adds none. */
    cal_group g = {.records = ptrs, .count = N, .gpu = "rtx3090-24gb", .files = "synthetic"};
    FILE *devnull = fopen("/dev/null", "w");
    ck_assert_int_eq(cal_fit_time(&g, sec, devnull, err, sizeof err), 0);
    ck_assert_int_eq(cJSON_GetArraySize(sec), 0);
    g.gpu = NULL;
    ck_assert_int_eq(cal_fit_time(&g, sec, devnull, err, sizeof err), 0);
    fclose(devnull);
    const char *names[] = {"framework_layer_host_s", "host_memory_efficiency"};
    const double want[] = {0.0021, 0.45};
    for (int i = 0; i < 2; i++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(sec, names[i]);
        ck_assert_msg(o != NULL, "%s not fitted", names[i]);
        double v = cJSON_GetObjectItemCaseSensitive(o, "value")->valuedouble;
        ck_assert_msg(fabs(v / want[i] - 1) < 0.02, "%s = %g, want %g", names[i], v, want[i]);
        const char *src = cJSON_GetObjectItemCaseSensitive(o, "source")->valuestring;
        ck_assert_msg(strstr(src, "ftest fit") && strstr(src, "synthetic"), "%s", src);
    }
    cJSON_Delete(sec);
    est_gpu_catalog_free(&cat);
}
END_TEST

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Issue 3's acceptance: the gpjt Qwen1.5-0.5B measurements (DeepSpeed, fp16,
 * one RTX 3090). Every record that carries an it/s tolerance is within it;
 * the per-group median and max errors are printed for the validation table. */
START_TEST(test_gpjt_it_per_s_within_tolerance) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    size_t len;
    char *text = ft_read_file(test_repo_path("calibrate/records/gpjt-qwen0.5b-rtx3090.jsonl"),
                              (size_t)1 << 30, &len, err, sizeof err);
    ck_assert_msg(text, "%s", err);
    enum { G = 8, MAXN = 4096 };
    char names[G][160];
    double *errs = calloc((size_t)G * MAXN, sizeof *errs);
    size_t count[G] = {0}, ng = 0, checked = 0, untolerated = 0;
    est_estimate e;
    est_estimate_init(&e);
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        est_record rec;
        ck_assert_msg(est_record_parse(line, strlen(line), &cat, &rec, err, sizeof err) == 0, "%s", err);
        if (rec.oom || isnan(rec.it_per_s)) {
            est_record_free(&rec);
            continue;
        }
        ck_assert_msg(est_estimate_run(&rec.run, &e, err, sizeof err) == 0, "%s", err);
        double rel = e.it_per_s / rec.it_per_s - 1;
        const char *file = strrchr(rec.source, '/');
        ck_assert_ptr_nonnull(file);
        size_t g = 0;
        while (g < ng && strcmp(names[g], file)) g++;
        if (g == ng) {
            ck_assert_uint_lt(ng, G);
            ft_strlcpy(names[ng++], file, sizeof names[0]);
        }
        ck_assert_uint_lt(count[g], MAXN);
        if (isnan(rec.tol_it_per_s_rel)) {
            untolerated++; /* the warm-up run at the start of a sequence sweep */
        } else {
            errs[g * MAXN + count[g]++] = rel;
            checked++;
            ck_assert_msg(fabs(rel) <= rec.tol_it_per_s_rel,
                          "%s b=%lld s=%lld: it/s %.3f measured, %.3f estimated (%+.1f%%)", file,
                          (long long)rec.run.micro_batch, (long long)rec.run.seq_len, rec.it_per_s,
                          e.it_per_s, 100 * rel);
        }
        est_record_free(&rec);
    }
    /* The two warm-up runs and the five offloaded batches of an unrecorded host. */
    ck_assert_uint_eq(untolerated, 7);
    ck_assert_uint_ge(checked, 4095);
    printf("gpjt it/s, estimate vs measured (signed error):\n");
    for (size_t g = 0; g < ng; g++) {
        double *x = errs + g * MAXN;
        size_t n = count[g];
        if (n == 0) continue; /* the offloaded batches: no tolerance, no errors */
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0 && x[j - 1] > x[j]; j--) {
                double t = x[j];
                x[j] = x[j - 1];
                x[j - 1] = t;
            }
        double med = n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
        double worst = fabs(x[0]) > fabs(x[n - 1]) ? x[0] : x[n - 1];
        printf("  %-70s n=%4zu median %+6.1f%% max %+6.1f%%\n", names[g] + 1, n, 100 * med, 100 * worst);
        /* Issue 23: the largest error of a sweep (past its warm-up run) 10%. */
        ck_assert_msg(fabs(worst) <= 0.10, "%s: largest it/s error %+.1f%%", names[g] + 1, 100 * worst);
    }
    /* Issue 23: the median |error| over the dataset within 3%. (Issue 8 held
     * each sweep's signed median within 3%; since the block's non-GEMM kernels
     * are counted op by op (tokenwork) the with-expandable-segments sweep sits
     * at -3.2% and the one without at +0.6%: the two sweeps of one job were
     * measured 3.8% apart, docs/validation.md.) */
    size_t all_n = 0;
    for (size_t g = 0; g < ng; g++)
        for (size_t i = 0; i < count[g]; i++) errs[all_n++] = fabs(errs[g * MAXN + i]);
    qsort(errs, all_n, sizeof *errs, cmp_double);
    const double all_med = all_n % 2 ? errs[all_n / 2] : 0.5 * (errs[all_n / 2 - 1] + errs[all_n / 2]);
    printf("  all sweeps n=%zu median |err| %.1f%%\n", all_n, 100 * all_med);
    ck_assert_msg(all_med <= 0.03, "median |it/s error| over the dataset %.1f%%", 100 * all_med);
    est_estimate_free(&e);
    free(errs);
    free(text);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* ftest fit on DeepSpeed ZeRO-3 records at 8 ranks recovers the link share
 * and the compute-communication interference the model was given (a
 * Llama-3-8B sequence sweep on 8 A100s, made by the model), the host time
 * held at the framework's. */
START_TEST(test_fit_recovers_zero3_constants) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    ft_model m;
    ck_assert_msg(ft_model_load("llama3-8b", &m, err, sizeof err) == 0, "%s", err);
    est_constants truth = defaults();
    truth.value[EST_K_FRAMEWORK_LAYER_HOST_S] = 0.0015;
    truth.value[EST_K_COMM_INTERFERENCE] = 0.55;
    truth.value[EST_K_ZERO3_COMM_EFF] = 0.3;
    enum { N = 32 };
    est_record recs[N];
    const est_record *ptrs[N];
    memset(recs, 0, sizeof recs);
    for (int i = 0; i < N; i++) {
        est_run_defaults(&recs[i].run, &m, est_gpu_find(&cat, "a100-80gb"));
        recs[i].run.precision = EST_PREC_FP16_MIXED;
        recs[i].run.zero_stage = 3;
        recs[i].run.gpus_per_node = 8;
        recs[i].run.seq_len = 1 + 128 * i;
        est_time_detail t;
        est_time_model(&recs[i].run, &truth, &t);
        recs[i].it_per_s = t.it_per_s;
        ptrs[i] = &recs[i];
    }
    cJSON *framework = cJSON_CreateObject();
    cal_put(framework, "framework_layer_host_s", 0.0015, "held");
    cJSON *sec = cJSON_CreateObject();
    cal_group g = {.records = ptrs, .count = N, .gpu = NULL, .files = "synthetic",
                   .framework = framework};
    FILE *devnull = fopen("/dev/null", "w");
    ck_assert_int_eq(cal_fit_time(&g, sec, devnull, err, sizeof err), 0);
    fclose(devnull);
    const char *names[] = {"zero3_comm_efficiency", "comm_compute_interference"};
    const double want[] = {0.3, 0.55};
    for (int i = 0; i < 2; i++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(sec, names[i]);
        ck_assert_msg(o != NULL, "%s not fitted", names[i]);
        double v = cJSON_GetObjectItemCaseSensitive(o, "value")->valuedouble;
        ck_assert_msg(fabs(v / want[i] - 1) < 0.02, "%s = %g, want %g", names[i], v, want[i]);
    }
    /* The host time is not refitted from multi-rank records. */
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(sec, "framework_layer_host_s"));
    cJSON_Delete(sec);
    cJSON_Delete(framework);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* The gpjt Llama-3-8B sweeps (8 x A100 80GB, DeepSpeed 0.14.2 ZeRO-3, fp16,
 * batch 1): the records, split by sweep (sweep 0 without expandable
 * segments, sweep 1 with them). */
typedef struct {
    est_record recs[64];
    size_t n;
} llama8b_records;

static void load_llama8b(const est_gpu_catalog *cat, llama8b_records *out) {
    char err[256];
    size_t len;
    char *text = ft_read_file(test_repo_path("calibrate/records/gpjt-llama3-8b-a100x8.jsonl"),
                              (size_t)1 << 26, &len, err, sizeof err);
    ck_assert_msg(text, "%s", err);
    out->n = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (!*line) continue;
        ck_assert_uint_lt(out->n, 64);
        est_record *r = &out->recs[out->n];
        ck_assert_msg(est_record_parse(line, strlen(line), cat, r, err, sizeof err) == 0, "%s", err);
        if (r->oom || !(r->it_per_s > 0) || r->run.offload != EST_OFFLOAD_NONE) {
            est_record_free(r); /* the ZeRO-2 offload sweep is judged apart */
            continue;
        }
        out->n++;
    }
    free(text);
    ck_assert_uint_eq(out->n, 46);
}

/* Signed errors of it/s on the records of `sweep` (-1: both) with constants k:
 * median |error| returned, median signed and max signed through the pointers. */
static double llama8b_errors(const llama8b_records *d, int sweep, const est_constants *k, double *median,
                             double *worst) {
    double e[64], a[64];
    size_t n = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (sweep >= 0 && d->recs[i].run.expandable_segments != (sweep == 1)) continue;
        est_time_detail t;
        est_time_model(&d->recs[i].run, k, &t);
        e[n] = t.it_per_s / d->recs[i].it_per_s - 1;
        a[n] = fabs(e[n]);
        n++;
    }
    ck_assert_uint_gt(n, 10);
    cal_sort(e, n);
    cal_sort(a, n);
    *median = n % 2 ? e[n / 2] : 0.5 * (e[n / 2 - 1] + e[n / 2]);
    *worst = fabs(e[0]) > fabs(e[n - 1]) ? e[0] : e[n - 1];
    return n % 2 ? a[n / 2] : 0.5 * (a[n / 2 - 1] + a[n / 2]);
}

/* Issue 8's time goal: with the committed profile, it/s on each Llama-3-8B
 * sweep within 15% median; and leave one sweep out: the ZeRO-3 link share and
 * the A100 matmul efficiency fitted on one sweep (host time held at the
 * committed framework-wide value, which the one-GPU records set) predict the
 * other within 15% median. The figures go to docs/validation.md. */
START_TEST(test_llama8b_it_per_s) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    llama8b_records *d = malloc(sizeof *d);
    ck_assert_ptr_nonnull(d);
    load_llama8b(&cat, d);
    est_constants k;
    ck_assert_msg(est_constants_for(est_framework_name(EST_FW_DEEPSPEED), "a100-80gb", &k, err, sizeof err) == 0, "%s", err);
    const char *names[] = {"without expandable segments", "with expandable segments"};
    printf("gpjt Llama-3-8B it/s, estimate vs measured (signed error):\n");
    for (int sw = -1; sw <= 1; sw++) {
        double med, worst;
        double mabs = llama8b_errors(d, sw, &k, &med, &worst);
        printf("  committed profile, %-28s median %+6.1f%% median |err| %5.1f%% max %+6.1f%%\n",
               sw < 0 ? "both sweeps" : names[sw], 100 * med, 100 * mabs, 100 * worst);
        ck_assert_msg(mabs <= 0.15, "median |error| %.1f%% on %s", 100 * mabs, sw < 0 ? "both" : names[sw]);
    }
    for (int fit_on = 0; fit_on <= 1; fit_on++) {
        const est_record *sel[64];
        size_t n = 0;
        for (size_t i = 0; i < d->n; i++)
            if (d->recs[i].run.expandable_segments == (fit_on == 1)) sel[n++] = &d->recs[i];
        cJSON *framework = cJSON_CreateObject();
        cal_put(framework, "framework_layer_host_s", k.value[EST_K_FRAMEWORK_LAYER_HOST_S], "committed");
        cJSON *sec = cJSON_CreateObject();
        cal_group g = {.records = sel, .count = n, .gpu = NULL, .files = "one sweep",
                       .framework = framework};
        FILE *devnull = fopen("/dev/null", "w");
        ck_assert_int_eq(cal_fit_time(&g, sec, devnull, err, sizeof err), 0);
        fclose(devnull);
        est_constants kk = k;
        const cJSON *z3 = cJSON_GetObjectItemCaseSensitive(sec, "zero3_comm_efficiency");
        const cJSON *eff = cJSON_GetObjectItemCaseSensitive(sec, "comm_compute_interference");
        ck_assert(z3 && eff);
        kk.value[EST_K_ZERO3_COMM_EFF] = cJSON_GetObjectItemCaseSensitive(z3, "value")->valuedouble;
        kk.value[EST_K_COMM_INTERFERENCE] = cJSON_GetObjectItemCaseSensitive(eff, "value")->valuedouble;
        double med, worst;
        double mabs = llama8b_errors(d, 1 - fit_on, &kk, &med, &worst);
        printf("  fitted on %-27s (link share %.4f, interference %.4f), checked on the other: median "
               "%+6.1f%% median |err| %5.1f%% max %+6.1f%%\n",
               names[fit_on], kk.value[EST_K_ZERO3_COMM_EFF], kk.value[EST_K_COMM_INTERFERENCE], 100 * med,
               100 * mabs, 100 * worst);
        ck_assert_msg(mabs <= 0.15, "fitted on %s, median |error| %.1f%% on the other", names[fit_on],
                      100 * mabs);
        cJSON_Delete(sec);
        cJSON_Delete(framework);
    }
    for (size_t i = 0; i < d->n; i++) est_record_free(&d->recs[i]);
    free(d);
    est_gpu_catalog_free(&cat);
}
END_TEST

Suite *suite_timing(void);
Suite *suite_timing(void) {
    Suite *s = suite_create("timing");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, test_model_flops_by_hand);
    tcase_add_test(tc, test_executed_flops_and_recompute);
    tcase_add_test(tc, test_zero_volumes);
    tcase_add_test(tc, test_qlora_dequantization_cost);
    tcase_add_test(tc, test_qlora_linear_bytes_by_hand);
    tcase_add_test(tc, test_frozen_embedding_has_no_backward);
    tcase_add_test(tc, test_qlora_mlp_width_bytes_by_hand);
    tcase_add_test(tc, test_every_path_has_a_time);
    tcase_add_test(tc, test_gpu_orderings_per_job);
    tcase_add_test(tc, test_offload_traffic);
    tcase_add_test(tc, test_zero3_lanes_by_hand);
    tcase_add_test(tc, test_host_runs_ahead_by_hand);
    tcase_add_test(tc, test_host_runs_ahead_through_the_ledger);
    tcase_add_test(tc, test_hours_in_whole_steps);
    tcase_add_test(tc, test_small_matrices_run_slow);
    tcase_add_test(tc, test_phase_times_add_up);
    tcase_add_test(tc, test_recommend_fastest_that_fits);
    suite_add_tcase(s, tc);
    tc = tcase_create("calibration");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fit_recovers_constants);
    tcase_add_test(tc, test_gpjt_it_per_s_within_tolerance);
    tcase_add_test(tc, test_fit_recovers_zero3_constants);
    tcase_add_test(tc, test_llama8b_it_per_s);
    suite_add_tcase(s, tc);
    return s;
}
