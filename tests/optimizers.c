/* Optimizer state (estimator/model/optimizers.c) against hand derivations from
 * bitsandbytes 0.44-0.45 optim/optimizer.py and transformers 4.40
 * optimization.py (docs/method.md, "Optimizers"). */
#include <check.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#include "constants.h"
#include "estimate.h"
#include "events.h"
#include "lora.h"
#include "optimizers.h"
#include "record.h"
#include "stack.h"
#include "work.h"
#include "test_util.h"

static est_run hf_run(const char *model, est_optimizer opt) {
    est_run run;
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load(model, &m, err, sizeof err) == 0, "%s", err);
    est_run_defaults(&run, &m, NULL);
    run.framework = EST_FW_HF;
    run.optimizer = opt;
    return run;
}

static const int64_t N8B = INT64_C(8030261248); /* Llama-3-8B, published */

/* The tensor list covers the model exactly: its elements sum to the total. */
START_TEST(test_tensors_cover_model) {
    est_run run = hf_run("llama3-8b", EST_OPT_ADAMW);
    est_tensor_group g[EST_MAX_TENSOR_GROUPS];
    int n = est_trainable_tensors(&run, g);
    int64_t sum = 0;
    for (int i = 0; i < n; i++) sum += g[i].count * g[i].rows * (g[i].cols ? g[i].cols : 1);
    ck_assert_int_eq(sum, N8B);
    run = hf_run("qwen2.5-0.5b", EST_OPT_ADAMW); /* q/k/v biases, tied embedding: 494,032,768 */
    n = est_trainable_tensors(&run, g);
    sum = 0;
    for (int i = 0; i < n; i++) sum += g[i].count * g[i].rows * (g[i].cols ? g[i].cols : 1);
    ck_assert_int_eq(sum, 494032768);
}
END_TEST

/* 8-bit AdamW on Llama-3-8B with fp32 parameters: every tensor has at least
 * 4096 elements (the norms exactly 4096, not below min_8bit_size), and every
 * size is a multiple of 256, so the state is two uint8 codes plus two fp32
 * absmax per 256 elements: 2 + 8/256 bytes per parameter against AdamW's
 * 2 x 4. Saved: 8 - 2.03125 = 5.96875 bytes per parameter ("about 6"), and
 * the foreach step temporary (4 per parameter) is gone too. */
START_TEST(test_adamw_8bit_saves_6_bytes) {
    est_run run = hf_run("llama3-8b", EST_OPT_ADAMW);
    est_optimizer_bytes a, b;
    est_optimizer_bytes_of(&run, 4, &a);
    ck_assert_int_eq(a.state_bytes, 8 * N8B);
    ck_assert_int_eq(a.step_bytes, 4 * N8B);
    run.optimizer = EST_OPT_ADAMW_8BIT;
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.state_bytes, 2 * N8B + N8B / 32);
    ck_assert_int_eq(b.step_bytes, 0);
    ck_assert_int_eq((a.state_bytes - b.state_bytes) * 32, 191 * N8B); /* 5.96875 = 191/32 */
    /* The same through the whole estimate: the optimizer category. */
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    run.seq_len = 256;
    run.gpu.memory_bytes = INT64_C(1) << 40;
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 2 * N8B + N8B / 32);
    est_estimate_free(&e);
}
END_TEST

/* tiny-llama (h 32, V 64): every tensor is under 4096 elements, so 8-bit
 * AdamW keeps all state in fp32: 8 bytes x 22,688. */
START_TEST(test_min_8bit_size) {
    est_run run = hf_run("tiny-llama", EST_OPT_ADAMW_8BIT);
    est_optimizer_bytes b;
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.state_bytes, 8 * 22688);
}
END_TEST

/* Paged 8-bit AdamW, Llama-3-8B full fine-tune: codes of tensors with at least
 * 1e5 elements are paged (all but the 65 norms of 4096); absmax stays on the
 * GPU. LoRA r=16 q,v: A is 16 x 4096 = 65,536 < 1e5, so nothing is paged;
 * r=64: A 262,144 and B (q) 262,144 are paged, B (v) 1024 x 64 = 65,536 not. */
START_TEST(test_paged) {
    est_run run = hf_run("llama3-8b", EST_OPT_PAGED_ADAMW_8BIT);
    est_optimizer_bytes b;
    est_optimizer_bytes_of(&run, 4, &b);
    const int64_t norms = 65 * 4096;
    ck_assert_int_eq(b.paged_bytes, 2 * (N8B - norms));
    ck_assert_int_eq(b.state_bytes, N8B / 32 + 2 * norms);
    ck_assert_int_eq(b.largest_paged_bytes, INT64_C(2) * 128256 * 4096); /* embedding or head */
    run.lora.rank = 16;
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.paged_bytes, 0);
    run.lora.rank = 64;
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.paged_bytes, 32 * 2 * (3 * 262144));
}
END_TEST

/* Adafactor (beta1=None), Llama-3-8B: per block the row + column sums of the
 * seven matrices, 8192 + 5120 + 5120 + 8192 + 3 x 18432 = 81,920, x32; the 65
 * norm vectors whole (4096 each); embedding and head 128256 + 4096 each; all
 * fp32. Lion: one fp32 moment. SGD with momentum: one buffer in the
 * parameters' dtype; without, nothing. */
START_TEST(test_adafactor_lion_sgd) {
    est_run run = hf_run("llama3-8b", EST_OPT_ADAFACTOR);
    est_optimizer_bytes b;
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.state_bytes, 4 * (32 * 81920 + 65 * 4096 + 2 * (128256 + 4096)));
    ck_assert_int_eq(b.step_bytes, INT64_C(2) * 128256 * 4096 * 4); /* the largest tensor, twice */
    run.optimizer = EST_OPT_ADAFACTOR_BETA1; /* plus exp_avg, fp32, every parameter */
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.state_bytes, 4 * (32 * 81920 + 65 * 4096 + 2 * (128256 + 4096)) + 4 * N8B);
    run.optimizer = EST_OPT_PAGED_ADAMW_32BIT; /* 8 bytes, paged from 1e5 elements */
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.paged_bytes, 8 * (N8B - 65 * 4096));
    ck_assert_int_eq(b.state_bytes, 8 * 65 * 4096);
    run.optimizer = EST_OPT_LION;
    est_optimizer_bytes_of(&run, 2, &b);
    ck_assert_int_eq(b.state_bytes, 4 * N8B);
    run.optimizer = EST_OPT_SGD_MOMENTUM;
    est_optimizer_bytes_of(&run, 2, &b);
    ck_assert_int_eq(b.state_bytes, 2 * N8B);
    run.optimizer = EST_OPT_SGD;
    est_optimizer_bytes_of(&run, 2, &b);
    ck_assert_int_eq(b.state_bytes + b.step_bytes, 0);
}
END_TEST

START_TEST(test_optimizer_bad_input) {
    est_run run = hf_run("llama3-8b", EST_OPT_ADAMW_8BIT);
    char err[256];
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), 0);
    run.framework = EST_FW_DEEPSPEED;
    run.optimizer = EST_OPT_LION; /* DeepSpeed takes adamw-8bit as a client optimizer (seam_deepspeed.c) */
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "--framework hf"));
    est_optimizer o;
    ck_assert_int_eq(est_optimizer_parse("adamw-8bit", &o, err, sizeof err), 0);
    ck_assert_int_eq(o, EST_OPT_ADAMW_8BIT);
    ck_assert_int_eq(est_optimizer_parse("adam8", &o, err, sizeof err), -1);
}
END_TEST

/* --optimizer-in-backward, Llama-3-8B in pure bf16 (w = 2) on one GPU: no
 * gradient buffer and no optimizer moment; the largest gradient alive is one
 * 128256 x 4096 matrix (head or embedding), stepped in its hook with AdamW's
 * two single-tensor temporaries of its size (2 x 128256 x 4096 x 2 bytes
 * beside the cuBLAS workspace of 8,519,680). The state is unchanged (2 x N x
 * 2). --activation-offload (save_on_cpu around the forward) with full
 * checkpointing puts on the host each block's input kept by its checkpoint
 * (2048 x 4096 x 2, 32 of them) and what the head saves: the final norm's
 * fp32 input (2048 x 4096 x 4), rsqrt (2048 x 4) and normalized bf16 value
 * (2048 x 4096 x 2), the LM head's bf16 input (2048 x 4096 x 2) and the
 * log-softmax of the fp32 logits over every row (the default stack's
 * transformers 4.49 shifts the labels, not the logits: 2048 x 128256 x 4);
 * the recompute in backward runs outside the hooks. */
START_TEST(test_in_backward_and_offload) {
    est_run run = hf_run("llama3-8b", EST_OPT_ADAMW);
    est_gpu g = {.name = "x", .memory_bytes = INT64_C(1) << 40};
    run.gpu = g;
    run.precision = EST_PREC_BF16;
    run.seq_len = 2048;
    run.checkpointing = EST_CKPT_FULL;
    run.optimizer_in_backward = true;
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(e.category_peak[EST_CAT_GRADS], INT64_C(128256) * 4096 * 2);
    /* two cuBLAS workspaces (8,519,680 each off compute capability 9.0): the
     * forward's handle's and the autograd device thread's */
    ck_assert_int_eq(e.category_peak[EST_CAT_WORKSPACE], INT64_C(2) * 128256 * 4096 * 2 + 2 * 8519680);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 4 * N8B);
    ck_assert_int_ne(e.tl.phases[e.tl.count - 1].kind, EST_PHASE_OPTIMIZER);
    ck_assert_int_eq(e.cpu_bytes, 0);
    const int64_t act_on_gpu = e.category_peak[EST_CAT_ACTIVATIONS];
    run.activation_offload = true;
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(e.cpu_bytes, INT64_C(32) * 2048 * 4096 * 2 + INT64_C(2048) * 4096 * 4 + 2048 * 4 +
                                      INT64_C(2) * 2048 * 4096 * 2 + INT64_C(2048) * 128256 * 4);
    ck_assert_int_lt(e.category_peak[EST_CAT_ACTIVATIONS], act_on_gpu);
    est_estimate_free(&e);
    run.gpus_per_node = 2;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    run.gpus_per_node = 1;
    run.framework = EST_FW_FSDP;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
}
END_TEST

/* Which AdamW runs (transformers training_args.py: the Trainer's default
 * optim is adamw_torch_fused from 4.54 when torch >= 2.8; stack.h
 * trainer_default_fused): the 2025-02 stack (4.49, torch 2.6) foreach, the
 * GPU image's (5.17, torch 2.11) fused; a named implementation wins; a plain
 * loop's torch.optim.AdamW() is foreach. Under DeepSpeed and FSDP the
 * Trainer makes the same optimizer (DeepSpeed's client optimizer, FSDP's over
 * the shards); ftrain steps its own. */
START_TEST(test_adamw_impl_by_stack) {
    est_run run = hf_run("llama3-8b", EST_OPT_ADAMW);
    run.stack = est_stack_find("2025-02");
    ck_assert(!est_optimizer_adamw_fused(&run));
    run.stack = est_stack_find("2026-11-gpu");
    ck_assert(est_optimizer_adamw_fused(&run));
    run.stack = est_stack_find("2026-07");
    ck_assert(est_optimizer_adamw_fused(&run));
    run.train_loop = EST_LOOP_PLAIN;
    ck_assert(!est_optimizer_adamw_fused(&run));
    run.train_loop = EST_LOOP_TRAINER;
    run.adamw_impl = EST_ADAMW_FOREACH; /* optim="adamw_torch" */
    ck_assert(!est_optimizer_adamw_fused(&run));
    run.adamw_impl = EST_ADAMW_FUSED;
    run.stack = est_stack_find("2024-04");
    ck_assert(est_optimizer_adamw_fused(&run));
    run.adamw_impl = EST_ADAMW_DEFAULT;
    run.stack = est_stack_find("2026-11");
    run.framework = EST_FW_DEEPSPEED;
    ck_assert(est_optimizer_adamw_fused(&run));
    run.framework = EST_FW_FSDP;
    ck_assert(est_optimizer_adamw_fused(&run));
    run.framework = EST_FW_FTRAIN;
    ck_assert(!est_optimizer_adamw_fused(&run));
    run.framework = EST_FW_HF;
    run.optimizer = EST_OPT_SGD;
    ck_assert(!est_optimizer_adamw_fused(&run));
    char err[256];
    est_adamw_impl impl;
    ck_assert_int_eq(est_adamw_impl_parse("fused", &impl, err, sizeof err), 0);
    ck_assert_int_eq(impl, EST_ADAMW_FUSED);
    ck_assert_int_eq(est_adamw_impl_parse("apex", &impl, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "foreach or fused"));
}
END_TEST

/* Fused AdamW on Llama-3-8B in fp32 (torch 2.11 optim/adam.py): exp_avg and
 * exp_avg_sq (2 x 4 bytes per parameter) and a 0-d float32 step counter on
 * the device per tensor (_init_group: device=p.device when fused), 291 tensors
 * (32 layers x (7 Linears + 2 norms) + final norm + embedding + LM head), each
 * counter 4 bytes asked of the caching allocator, which hands out no block
 * below kMinBlockSize = 512 bytes (CUDACachingAllocator.cpp round_size) and
 * counts the block in memory_allocated: 291 x 512;
 * _fused_adamw_ updates in place, so no step temporary where foreach's
 * _foreach_sqrt holds 4 bytes per parameter; its traffic is the clip's 3
 * passes and one read of p, g, m, v and write of p, m, v: 10 x 4 bytes
 * per parameter against foreach's 22 x 4 under the HF Trainer (clip 3;
 * lerp_ 3, mul_ 2, addcmul_ 4, sqrt 2, div_ 2, add_ 2, addcdiv_ 4; the
 * decoupled decay's mul_ skipped at TrainingArguments' weight_decay 0.0:
 * torch 2.11 optim/adam.py `if weight_decay != 0`) and 24 x 4 in a plain
 * loop (torch.optim.AdamW's own weight_decay 1e-2: the mul_'s read and
 * write of p). */
START_TEST(test_fused_adamw_bytes) {
    est_run run = hf_run("llama3-8b", EST_OPT_ADAMW);
    run.stack = est_stack_find("2026-11-gpu");
    est_optimizer_bytes b;
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.state_bytes, 8 * N8B + 512 * 291);
    ck_assert_int_eq(b.step_bytes, 0);
    ck_assert_int_eq(est_optimizer_tensor_step_bytes(&run, 4096, 4), 0);
    ck_assert_double_eq(est_optimizer_traffic_per_param(&run, 4), 40);
    ck_assert_str_eq(est_optimizer_step_label(&run), "optimizer step (fused AdamW)");
    ck_assert_int_eq(est_optimizer_step_scalar_bytes(&run), 0); /* bf16: no GradScaler */
    run.precision = EST_PREC_FP16_MIXED; /* found_inf, one 0-d fp32 tensor: a 512-byte block */
    ck_assert_int_eq(est_optimizer_step_scalar_bytes(&run), 512);
    run.precision = EST_PREC_BF16_MIXED;
    run.adamw_impl = EST_ADAMW_FOREACH;
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.state_bytes, 8 * N8B);
    ck_assert_int_eq(b.step_bytes, 4 * N8B);
    ck_assert(!est_optimizer_decays_weights(&run));
    ck_assert_double_eq(est_optimizer_traffic_per_param(&run, 4), 88);
    run.train_loop = EST_LOOP_PLAIN;
    ck_assert(est_optimizer_decays_weights(&run));
    ck_assert_double_eq(est_optimizer_traffic_per_param(&run, 4), 96);
}
END_TEST

/* Kernel launches of the step on Llama-3.2-1B (1,235,814,400 parameters,
 * tied: 2 + 16 x 9 = 146 tensors). A multi-tensor op launches once per 320
 * chunks of 65,536 elements (MultiTensorApply.cuh depth_to_max_blocks), a
 * tensor's last chunk partial: ceil((1,235,814,400 / 65,536 + 146) / 320) =
 * ceil(59.4) = 60, above every list-count bound (146 / 36 at most 5). foreach
 * under the HF Trainer (clip's norm and mul_, seven _foreach_ ops: lerp_,
 * mul_, addcmul_, sqrt, div_, add_, addcdiv_; no weight decay mul_ at
 * weight_decay 0.0): 9 x 60 = 540, in a plain loop (the decay's mul_ too)
 * 10 x 60 = 600; fused: clip's two and _fused_adamw_ 3 x 60, and the step
 * counters' _foreach_add_ over 146 one-element tensors, bound by tensors,
 * ceil(146 / 110) = 2 (chunks: ceil((146 / 65,536 + 146) / 320) = 1): 182. */
START_TEST(test_fused_adamw_launches) {
    est_run run = hf_run("llama3.2-1b", EST_OPT_ADAMW);
    run.stack = est_stack_find("2026-11-gpu");
    est_constants k;
    est_constants_defaults(&k);
    double kernels[3];
    for (int fused = 0; fused < 3; fused++) {
        run.adamw_impl = fused == 1 ? EST_ADAMW_FUSED : EST_ADAMW_FOREACH;
        run.train_loop = fused == 2 ? EST_LOOP_PLAIN : EST_LOOP_TRAINER;
        est_step st;
        est_step_init(&st);
        est_work_emit(&st, &run, &k, EST_UNIT_OPTIMIZER, -1);
        kernels[fused] = 0;
        for (size_t i = 0; i < st.work_count; i++)
            if (st.work[i].kind == EST_EV_MEMORY_OP) kernels[fused] += st.work[i].u.op.kernels;
        est_step_free(&st);
    }
    ck_assert_double_eq(kernels[0], 540);
    ck_assert_double_eq(kernels[1], 182);
    ck_assert_double_eq(kernels[2], 600);
}
END_TEST

/* The record keys that name the implementation (record_optim.h): the HF
 * Trainer's optim, adamw_impl, the CPU traces' settings.optimizer_foreach,
 * and the probe's Trainer modes (probe_run.py HF_OPTIM: "adamw_torch");
 * none of them on the GPU image's stack: the Trainer's default, fused. */
static est_adamw_impl record_impl(const char *extra) {
    char line[1024];
    snprintf(line, sizeof line,
             "{\"schema\":\"ftest.record/1\",\"source\":\"t\",\"date\":\"d\",\"framework\":\"hf\","
             "\"hardware\":{\"gpu\":\"h200-141gb\",\"gpus_per_node\":1,\"nodes\":1},"
             "\"config\":{\"model\":\"llama3.2-1b\",\"micro_batch\":1,\"grad_accum\":1,\"seq_len\":16,"
             "\"precision\":\"bf16-mixed\",\"zero\":0,\"optimizer\":\"adamw\",\"stack\":\"2026-11-gpu\"%s},"
             "\"measured\":{\"oom\":true}}",
             extra);
    est_gpu_catalog cat;
    est_record rec;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(est_record_parse(line, strlen(line), &cat, &rec, err, sizeof err) == 0, "%s", err);
    est_gpu_catalog_free(&cat);
    ck_assert(est_optimizer_adamw_fused(&rec.run) == (rec.run.adamw_impl != EST_ADAMW_FOREACH));
    return rec.run.adamw_impl;
}

START_TEST(test_record_adamw_impl) {
    ck_assert_int_eq(record_impl(""), EST_ADAMW_DEFAULT);
    ck_assert_int_eq(record_impl(",\"optim\":\"adamw_torch\""), EST_ADAMW_FOREACH);
    ck_assert_int_eq(record_impl(",\"optim\":\"adamw_torch_fused\""), EST_ADAMW_FUSED);
    ck_assert_int_eq(record_impl(",\"adamw_impl\":\"foreach\""), EST_ADAMW_FOREACH);
    ck_assert_int_eq(record_impl(",\"probe_mode\":\"hf\""), EST_ADAMW_FOREACH);
    /* the probe's FSDP loop: torch.optim.AdamW(params), foreach (probe_run.py run_fsdp) */
    ck_assert_int_eq(record_impl(",\"probe_mode\":\"fsdp\""), EST_ADAMW_FOREACH);
    ck_assert_int_eq(record_impl(",\"probe_mode\":\"fsdp2\""), EST_ADAMW_FOREACH);
    ck_assert_int_eq(record_impl(",\"settings\":{\"optimizer_foreach\":true}"), EST_ADAMW_FOREACH);
}
END_TEST

/* The command line and axolotl's optimizer name the implementation:
 * --adamw-impl, optimizer: adamw_torch (foreach) / adamw_torch_fused (fused,
 * on the Trainer, under DeepSpeed and FSDP too), and without the key
 * axolotl's default, adamw_torch_fused (schemas/training.py); ftrain's own
 * optimizer refuses fused. */
static est_adamw_impl cli_impl(const char *yaml, const char *flag) {
    char path[64] = "/tmp/ftest-adamw-XXXXXX", err[256];
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs(yaml, f);
    fclose(f);
    char *argv[] = {"ftest", "--axolotl", path, (char *)flag, (char *)"foreach", NULL};
    est_run run;
    ck_assert_msg(test_cli_build(flag ? 5 : 3, argv, &run, err, sizeof err) == 0, "%s", err);
    unlink(path);
    return run.adamw_impl;
}

START_TEST(test_cli_and_axolotl_adamw_impl) {
    const char *base = "base_model: meta-llama/Meta-Llama-3-8B\nsequence_len: 512\nmicro_batch_size: 1\n";
    char y[512];
    snprintf(y, sizeof y, "%soptimizer: adamw_torch_fused\n", base);
    ck_assert_int_eq(cli_impl(y, NULL), EST_ADAMW_FUSED);
    ck_assert_int_eq(cli_impl(y, "--adamw-impl"), EST_ADAMW_FOREACH); /* the flag wins */
    snprintf(y, sizeof y, "%soptimizer: adamw_torch\n", base);
    ck_assert_int_eq(cli_impl(y, NULL), EST_ADAMW_FOREACH);
    /* no optimizer key: axolotl's schema default, adamw_torch_fused */
    ck_assert_int_eq(cli_impl(base, NULL), EST_ADAMW_FUSED);
    ck_assert_int_eq(cli_impl(base, "--adamw-impl"), EST_ADAMW_FOREACH);
    char err[256];
    char *argv[] = {"ftest", "--model", "llama3-8b", "--framework", "deepspeed", "--adamw-impl", "fused", NULL};
    est_run run;
    ck_assert_msg(test_cli_build(7, argv, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.adamw_impl, EST_ADAMW_FUSED);
    argv[4] = "ftrain";
    ck_assert_int_ne(test_cli_build(7, argv, &run, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "not --framework ftrain"));
}
END_TEST

/* The Trainer's AdamW over FSDP's shards on the GPU image's stack, whose
 * default optim is adamw_torch_fused: Qwen1.5-0.5B, FULL_SHARD on 8 ranks,
 * fp32 shards (bf16-mixed loads fp32). A block unit holds q, k, v, o 1024 x
 * 1024, q, k, v biases 1024, gate, up, down 1024 x 2816 and two norms 1024:
 * 4 x 1,048,576 + 3 x 1024 + 3 x 2,883,584 + 2 x 1024 = 12,850,176
 * elements, a shard 12,850,176 / 8 = 1,606,272; the root the embedding
 * 151,936 x 1024 and the final norm 1024 (the head is tied): 155,583,488,
 * a shard 19,447,936. Fused adds one 512-byte step counter per optimizer
 * tensor to the state (a 0-d fp32 tensor in a kMinBlockSize block): FSDP1
 * steps one FlatParameter shard per unit, 24 blocks + the root = 25; FSDP2
 * one DTensor per parameter, 24 x 12 + embedding + final norm = 290. Foreach
 * instead holds _foreach_sqrt's temporaries, one per tensor, all at once,
 * 4 bytes per shard element: 4 x (24 x 1,606,272 + 19,447,936). */
static est_run fsdp_qwen(est_fsdp_version v) {
    est_run run = test_run_of("qwen1.5-0.5b", "h100");
    run.framework = EST_FW_FSDP;
    run.fsdp_version = v;
    run.gpus_per_node = 8;
    run.zero_stage = 3;
    run.seq_len = 2048;
    run.stack = est_stack_find("2026-11-gpu");
    return run;
}

START_TEST(test_fsdp_fused_adamw) {
    const int64_t shards = 24 * INT64_C(1606272) + INT64_C(19447936);
    const int64_t counters[2] = {25, 290};
    const est_fsdp_version versions[2] = {EST_FSDP1, EST_FSDP2};
    for (int v = 0; v < 2; v++) {
        est_run run = fsdp_qwen(versions[v]);
        ck_assert(est_optimizer_adamw_fused(&run)); /* the Trainer's default here */
        est_estimate fused, each;
        test_estimate(&run, &fused);
        run.adamw_impl = EST_ADAMW_FOREACH;
        test_estimate(&run, &each);
        const est_phase *f = test_row(&fused, "forward layer 0");
        const est_phase *g = test_row(&each, "forward layer 0");
        ck_assert_int_eq(f->bytes[EST_CAT_OPTIMIZER] - g->bytes[EST_CAT_OPTIMIZER], 512 * counters[v]);
        ck_assert_int_eq(g->bytes[EST_CAT_OPTIMIZER], 8 * shards);
        const est_phase *fs = test_row(&fused, "optimizer step (fused AdamW)");
        const est_phase *gs = test_row(&each, "optimizer step (foreach AdamW)");
        ck_assert_int_eq(gs->own_max[EST_CAT_WORKSPACE] - fs->own_max[EST_CAT_WORKSPACE], 4 * shards);
        est_estimate_free(&fused);
        est_estimate_free(&each);
    }
}
END_TEST

/* DeepSpeed steps the Trainer's AdamW as its client optimizer when the config
 * names none (ds.client_optimizer), on its flat fp32 partitions: ZeRO-2, one
 * rank, Qwen1.5-0.5B (463,987,712 parameters), bf16-mixed. Memory: fused
 * adds a 512-byte step counter per fp32 tensor, one per optimizer group, and
 * the Trainer's groups are two (decay, and biases + norms): 1024 bytes, 512
 * with one group; foreach's sqrt temporary of the partition is gone. Time,
 * per parameter: the Trainer's groups both carry TrainingArguments'
 * weight_decay 0.0 (transformers 5.17 training_args.py), so torch's foreach
 * update skips its decay pass (torch 2.11 optim/adam.py runs
 * _foreach_mul_(params) only if weight_decay != 0): 19 passes of 4 bytes
 * against fused's 7, 48 x 463,987,712 bytes more; a script's one group keeps
 * torch's 1e-2: 21 passes, 56 x. Launches over the one flat tensor: a
 * multi-tensor op takes ceil((463,987,712 / 65,536 + 1) / 320) = 23; foreach
 * 7 ops (161; 8 with the decay: 184), fused _fused_adamw_ 23 and
 * _foreach_add_ on one counter 1 (24); DeepSpeed's own FusedAdam (a config
 * that names an optimizer) 23, at fused's bytes. */
static void ds_optimizer_work(const est_run *run, double *bytes, double *kernels) {
    est_constants k;
    est_constants_defaults(&k);
    est_step st;
    est_step_init(&st);
    est_work_emit(&st, run, &k, EST_UNIT_OPTIMIZER, -1);
    *bytes = *kernels = 0;
    for (size_t i = 0; i < st.work_count; i++)
        if (st.work[i].kind == EST_EV_MEMORY_OP) {
            *bytes += st.work[i].u.op.bytes;
            *kernels += st.work[i].u.op.kernels;
        }
    est_step_free(&st);
}

START_TEST(test_deepspeed_client_fused_adamw) {
    est_run run = test_run_of("qwen1.5-0.5b", "h100");
    run.framework = EST_FW_DEEPSPEED;
    run.gpus_per_node = 1;
    run.zero_stage = 2;
    run.seq_len = 1024;
    run.stack = est_stack_find("2026-11-gpu");
    run.ds.client_optimizer = true;
    est_estimate fused, each;
    test_estimate(&run, &fused);
    double fb, fk, eb, ek, ob, ok;
    ds_optimizer_work(&run, &fb, &fk);
    run.adamw_impl = EST_ADAMW_FOREACH;
    test_estimate(&run, &each);
    ds_optimizer_work(&run, &eb, &ek);
    ck_assert_int_eq(fused.category_peak[EST_CAT_OPTIMIZER] - each.category_peak[EST_CAT_OPTIMIZER], 2 * 512);
    ck_assert_double_eq(eb - fb, 48.0 * 463987712);
    ck_assert_double_eq(ek - fk, 161 - 24);
    run.ds.client_one_group = true;
    run.adamw_impl = EST_ADAMW_DEFAULT;
    est_estimate_free(&fused);
    test_estimate(&run, &fused);
    est_estimate_free(&each);
    run.adamw_impl = EST_ADAMW_FOREACH;
    test_estimate(&run, &each);
    ds_optimizer_work(&run, &eb, &ek);
    ck_assert_double_eq(eb - fb, 56.0 * 463987712);
    ck_assert_double_eq(ek - fk, 184 - 24);
    ck_assert_int_eq(fused.category_peak[EST_CAT_OPTIMIZER] - each.category_peak[EST_CAT_OPTIMIZER], 512);
    run.adamw_impl = EST_ADAMW_DEFAULT;
    run.ds.client_optimizer = false; /* DeepSpeed's FusedAdam: no torch AdamW */
    ds_optimizer_work(&run, &ob, &ok);
    ck_assert_double_eq(ob, fb);
    ck_assert_double_eq(fk - ok, 1);
    est_estimate_free(&fused);
    est_estimate_free(&each);
}
END_TEST

Suite *suite_optimizers(void);
Suite *suite_optimizers(void) {
    Suite *s = suite_create("optimizers");
    TCase *tc = tcase_create("optimizers");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_tensors_cover_model);
    tcase_add_test(tc, test_adamw_8bit_saves_6_bytes);
    tcase_add_test(tc, test_min_8bit_size);
    tcase_add_test(tc, test_paged);
    tcase_add_test(tc, test_adafactor_lion_sgd);
    tcase_add_test(tc, test_optimizer_bad_input);
    tcase_add_test(tc, test_in_backward_and_offload);
    tcase_add_test(tc, test_adamw_impl_by_stack);
    tcase_add_test(tc, test_fused_adamw_bytes);
    tcase_add_test(tc, test_fused_adamw_launches);
    tcase_add_test(tc, test_record_adamw_impl);
    tcase_add_test(tc, test_cli_and_axolotl_adamw_impl);
    tcase_add_test(tc, test_fsdp_fused_adamw);
    tcase_add_test(tc, test_deepspeed_client_fused_adamw);
    suite_add_tcase(s, tc);
    return s;
}
