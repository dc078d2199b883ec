#include "optimizers.h"

#include <string.h>

#include "fw_registry.h"
#include "json_util.h"
#include "lora.h"
#include "params.h"
#include "stack.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void put(est_tensor_group *out, int *n, int64_t rows, int64_t cols, int64_t count) {
    if (*n >= EST_MAX_TENSOR_GROUPS || rows <= 0 || count <= 0) return;
    out[*n].rows = rows;
    out[*n].cols = cols;
    out[*n].count = count;
    (*n)++;
}

int est_trainable_tensors(const est_run *run, est_tensor_group out[EST_MAX_TENSOR_GROUPS]) {
    const ft_model *m = &run->model;
    const int64_t L = run->layers_used;
    int n = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        int64_t din, dout;
        est_linear_shape(m, (est_lora_target)t, &din, &dout);
        if (est_lora_on(run)) {
            if (!(run->lora.targets & EST_LORA_BIT(t))) continue;
            put(out, &n, run->lora.rank, din, L); /* A: (r, d_in) */
            put(out, &n, dout, run->lora.rank, L); /* B: (d_out, r) */
            continue;
        }
        put(out, &n, dout, din, L); /* nn.Linear weight: (d_out, d_in) */
        bool bias = t <= EST_LORA_V ? m->qkv_bias : t == EST_LORA_O ? m->o_bias : m->mlp_bias;
        if (bias) put(out, &n, dout, 0, L);
    }
    if (est_lora_on(run)) return n;
    put(out, &n, m->hidden_size, 0, 2 * L + 1);          /* two norms per block, the final norm */
    put(out, &n, m->vocab_size, m->hidden_size, 1);      /* embedding */
    if (!m->tied_embeddings) put(out, &n, m->vocab_size, m->hidden_size, 1); /* LM head */
    return n;
}

static void torchao_4bit_state(int64_t n, int64_t w, est_tensor_state *out) {
    /* torchao subclass_4bit.py OptimState4bit.zeros: codes, uint8, two
     * values a byte (n / 2); scale, fp32, one per block (n / 128); qmap,
     * 16 fp32 (get_qmap_signed / get_qmap_unsigned), per state. Smaller
     * or ragged tensors keep zeros_like(p). The step is one
     * torch.compile'd single_param_adam per parameter; its fp32
     * exp_avg_f32 and exp_avg_sq_f32 (n x 4 each) are taken as
     * materialized (the bound: a per-block scale is reduced before the
     * codes are written). */
    if (n < EST_AO4_MIN_ELEMS || n % EST_AO4_BLOCK != 0) {
        out->device[out->count++] = n * w;
        out->device[out->count++] = n * w;
    } else {
        out->device[out->count++] = n / 2 + n / EST_AO4_BLOCK * 4 + 16 * 4;
        out->device[out->count++] = n / 2 + n / EST_AO4_BLOCK * 4 + 16 * 4;
    }
    out->single_bytes = 2 * n * 4;
}

static void adamw_state(const est_run *run, int64_t n, int64_t w, est_tensor_state *out) {
    const bool fused = est_optimizer_adamw_fused(run);
    /* torch 2.11 optim/adam.py _init_group, in its order: the step counter
     * (with fused a device tensor, EST_ADAMW_FUSED_STEP_BYTES; on the host
     * otherwise), then exp_avg and exp_avg_sq, zeros_like(param). */
    if (fused) out->device[out->count++] = EST_ADAMW_FUSED_STEP_BYTES;
    out->device[out->count++] = n * w;
    out->device[out->count++] = n * w;
    if (fused) {
        /* _fused_adam adds 1 to the step counters in place and _fused_adamw_
         * updates p, exp_avg, exp_avg_sq in place: no temporary. grad_scale
         * and found_inf are the GradScaler's own scalars under fp16 (None
         * under bf16). */
        return;
    }
    /* the foreach step's _foreach_sqrt(exp_avg_sqs): one temporary per
     * parameter; _single_tensor_adamw: exp_avg_sq.sqrt() /
     * bias_correction2_sqrt, two n-sized temporaries at once
     * (--optimizer-in-backward). */
    out->foreach_bytes = n * w;
    out->single_bytes = 2 * n * w;
}

void est_optimizer_tensor_state(const est_run *run, int64_t rows, int64_t cols, int64_t w,
                                est_tensor_state *out) {
    const int64_t n = rows * (cols ? cols : 1);
    memset(out, 0, sizeof *out);
    const bool paged = run->optimizer == EST_OPT_PAGED_ADAMW_8BIT;
    const bool paged32 = run->optimizer == EST_OPT_PAGED_ADAMW_32BIT;
    switch (run->optimizer) {
    case EST_OPT_ADAMW: adamw_state(run, n, w, out); break;
    case EST_OPT_SGD: break; /* no momentum buffer; the update is in place */
    case EST_OPT_SGD_MOMENTUM:
        out->device[out->count++] = n * w; /* momentum_buffer = clone(grad) */
        break;
    case EST_OPT_ADAMW_8BIT:
    case EST_OPT_PAGED_ADAMW_8BIT:
        /* The fused kernels update in place: no step temporary. */
        if (n < EST_BNB_MIN_8BIT_ELEMS) {
            out->device[out->count++] = n * 4; /* state1, state2 in fp32 */
            out->device[out->count++] = n * 4;
        } else {
            const int64_t absmax = ceil_div(n, EST_BNB_STATE_BLOCK) * 4;
            out->device[out->count++] = absmax; /* plain torch.zeros: never paged */
            out->device[out->count++] = absmax;
            if (paged && n >= EST_BNB_PAGED_MIN_ELEMS) {
                out->paged_bytes = 2 * n; /* state1, state2: uint8 */
            } else {
                out->device[out->count++] = n;
                out->device[out->count++] = n;
            }
        }
        break;
    case EST_OPT_LION:
        out->device[out->count++] = n * 4; /* one fp32 moment (state1) */
        break;
    case EST_OPT_ADAMW_4BIT: torchao_4bit_state(n, w, out); break;
    case EST_OPT_PAGED_ADAMW_32BIT:
        /* bitsandbytes PagedAdamW32bit: fp32 state1/state2, paged from 1e5
         * elements, no quantization constants. */
        if (paged32 && n >= EST_BNB_PAGED_MIN_ELEMS) {
            out->paged_bytes = 2 * n * 4;
        } else {
            out->device[out->count++] = n * 4;
            out->device[out->count++] = n * 4;
        }
        break;
    case EST_OPT_ADAFACTOR:
    case EST_OPT_ADAFACTOR_BETA1:
        /* fp32 (`.to(grad)` after grad.float()): a matrix keeps a row and a
         * column mean of the squared gradient, a vector the full second
         * moment; with beta1 set, exp_avg = zeros_like(grad) too. */
        if (cols) {
            out->device[out->count++] = 4 * rows;
            out->device[out->count++] = 4 * cols;
        } else {
            out->device[out->count++] = 4 * n;
        }
        if (run->optimizer == EST_OPT_ADAFACTOR_BETA1) out->device[out->count++] = 4 * n;
        /* One parameter at a time: `update = grad**2 + eps` and then
         * `_approx_sq_grad(...)` (two n-sized fp32 tensors at once), and
         * `p.add_(-update)`; 16-bit parameters add fp32 copies of the
         * gradient and of the parameter. */
        out->single_bytes = 2 * n * 4 + (w < 4 ? 2 * n * 4 : 0);
        break;
    }
}

void est_optimizer_bytes_of(const est_run *run, int64_t w, est_optimizer_bytes *out) {
    out->state_bytes = out->paged_bytes = out->largest_paged_bytes = out->step_bytes = 0;
    est_tensor_group g[EST_MAX_TENSOR_GROUPS];
    const int ng = est_trainable_tensors(run, g);
    for (int i = 0; i < ng; i++) {
        est_tensor_state ts;
        est_optimizer_tensor_state(run, g[i].rows, g[i].cols, w, &ts);
        for (int j = 0; j < ts.count; j++) out->state_bytes += g[i].count * ts.device[j];
        out->paged_bytes += g[i].count * ts.paged_bytes;
        if (ts.paged_bytes > out->largest_paged_bytes) out->largest_paged_bytes = ts.paged_bytes;
        out->step_bytes += g[i].count * ts.foreach_bytes;
        if (ts.foreach_bytes == 0 && ts.single_bytes > out->step_bytes) out->step_bytes = ts.single_bytes;
    }
}

int64_t est_optimizer_tensor_step_bytes(const est_run *run, int64_t n, int64_t w) {
    switch (run->optimizer) {
    case EST_OPT_ADAMW: return est_optimizer_adamw_fused(run) ? 0 : 2 * n * w;
    case EST_OPT_ADAFACTOR:
    case EST_OPT_ADAFACTOR_BETA1: return 2 * n * 4 + (w < 4 ? 2 * n * 4 : 0);
    case EST_OPT_ADAMW_4BIT: return 2 * n * 4;
    default: return 0;
    }
}

double est_optimizer_traffic_per_param(const est_run *run, double w) {
    /* Gradient clipping (norm 1 pass, scale 2 passes) and the update's passes
     * over w-byte tensors, from the update formulas. */
    const double clip = 3 * w;
    switch (run->optimizer) {
    case EST_OPT_ADAMW: return clip + est_adamw_update_passes(run) * w;
    case EST_OPT_SGD: return 6 * w;
    case EST_OPT_SGD_MOMENTUM: return clip + 8 * w; /* buf mul_ (2), add_ (3), p add_ (3) */
    case EST_OPT_ADAMW_8BIT:
    case EST_OPT_PAGED_ADAMW_8BIT:
        return clip + 3 * w + 4; /* read p, g, m, v; write p, m, v (8-bit moments) */
    case EST_OPT_LION: return clip + 3 * w + 8; /* read p, g, m (fp32); write p, m */
    case EST_OPT_PAGED_ADAMW_32BIT: return clip + 3 * w + 16; /* fp32 moments */
    case EST_OPT_ADAFACTOR: return clip + 16 * 4; /* ~16 fp32 element passes per update */
    case EST_OPT_ADAFACTOR_BETA1: return clip + 19 * 4; /* and exp_avg's mul_/add_ */
    case EST_OPT_ADAMW_4BIT: return clip + 3 * w + 2; /* read p, g, m, v; write p, m, v (4-bit moments) */
    }
    return 0;
}

double est_adamw_update_passes(const est_run *run) {
    /* fused: one kernel reads p, g, m, v and writes p, m, v (7 passes,
     * aten/src/ATen/native/cuda/fused_adamw_impl.cu via FusedAdamKernel);
     * foreach (torch 2.11 optim/adam.py _multi_tensor_adam): lerp_ m (3),
     * mul_ v (2), addcmul_ v (4), sqrt (2), div_ (2), add_ eps (2), addcdiv_
     * p (4), and the decoupled weight decay's mul_ p (2) where it runs
     * (est_optimizer_decays_weights): 21 or 19 */
    if (est_optimizer_adamw_fused(run)) return 7;
    return est_optimizer_decays_weights(run) ? 21 : 19;
}

int est_adamw_update_ops(const est_run *run, const est_mt_op **ops) {
    /* the lists each multi-tensor op walks: fused (torch 2.11 optim/adam.py
     * _fused_adam), _foreach_add_ on the device step counters (1 list of 0-d
     * tensors) and _fused_adamw_ over params, grads, exp_avgs, exp_avg_sqs
     * (4); foreach, the eight ops above (lerp_ 2, mul_ 1, addcmul_ 3, sqrt 2,
     * div_ 1, add_ 1, addcdiv_ 3, and the weight decay's mul_ 1 where it runs;
     * its step counters are on the host) */
    static const est_mt_op FUSED[2] = {{1, true}, {4, false}};
    static const est_mt_op FOREACH[8] = {{2, false}, {1, false}, {3, false}, {2, false},
                                         {1, false}, {1, false}, {3, false}, {1, false}};
    const bool fused = est_optimizer_adamw_fused(run);
    *ops = fused ? FUSED : FOREACH;
    return fused ? 2 : est_optimizer_decays_weights(run) ? 8 : 7;
}

bool est_optimizer_adamw_fused(const est_run *run) {
    if (run->optimizer != EST_OPT_ADAMW || !est_fw_has(run, EST_FEAT_FUSED_ADAMW)) return false;
    if (run->adamw_impl != EST_ADAMW_DEFAULT) return run->adamw_impl == EST_ADAMW_FUSED;
    return run->train_loop == EST_LOOP_TRAINER && run->stack && run->stack->trainer_default_fused;
}

bool est_optimizer_decays_weights(const est_run *run) {
    /* DeepSpeed stepping the HF Trainer's own AdamW (a config without
     * "optimizer": transformers 5.17 integrations/deepspeed.py
     * deepspeed_optim_sched -> trainer.create_optimizer(), its two groups
     * both at TrainingArguments.weight_decay 0.0); a script's one-group
     * optimizer keeps torch's 1e-2 */
    if (run->ds.client_optimizer && !run->ds.client_one_group) return false;
    /* the framework whose step is the HF Trainer's unless a plain loop is
     * named (fw_registry.h EST_FEAT_PLAIN_LOOP: --framework hf) */
    return !(est_fw_has(run, EST_FEAT_PLAIN_LOOP) && run->train_loop == EST_LOOP_TRAINER);
}

int64_t est_optimizer_step_scalar_bytes(const est_run *run) {
    return est_optimizer_adamw_fused(run) && run->precision == EST_PREC_FP16_MIXED ? EST_DEVICE_SCALAR_BYTES : 0;
}

int est_adamw_impl_parse(const char *s, est_adamw_impl *out, char *err, size_t errlen) {
    if (s && !strcmp(s, "foreach")) *out = EST_ADAMW_FOREACH;
    else if (s && !strcmp(s, "fused")) *out = EST_ADAMW_FUSED;
    else return ft_errorf(err, errlen, "--adamw-impl: expected foreach or fused, got \"%.40s\"", s ? s : "");
    return 0;
}

int est_optimizer_validate(const est_run *run, char *err, size_t errlen) {
    if (run->adamw_impl != EST_ADAMW_DEFAULT && run->optimizer != EST_OPT_ADAMW)
        return ft_errorf(err, errlen, "--adamw-impl needs --optimizer adamw");
    if (run->adamw_impl == EST_ADAMW_FUSED && est_fw_models(run, EST_FEAT_FUSED_ADAMW, NULL, err, errlen) < 0)
        return -1;
    if (run->optimizer == EST_OPT_ADAMW || run->optimizer == EST_OPT_SGD) return 0;
    return est_fw_models(run, EST_FEAT_OPTIMIZER, est_optimizer_name(run->optimizer), err, errlen);
}

const char *est_optimizer_step_label(const est_run *run) {
    switch (run->optimizer) {
    case EST_OPT_ADAMW:
        return est_optimizer_adamw_fused(run) ? "optimizer step (fused AdamW)" : "optimizer step (foreach AdamW)";
    case EST_OPT_ADAMW_8BIT: return "optimizer step (8-bit AdamW)";
    case EST_OPT_PAGED_ADAMW_8BIT: return "optimizer step (paged 8-bit AdamW)";
    case EST_OPT_ADAFACTOR: return "optimizer step (Adafactor)";
    case EST_OPT_LION: return "optimizer step (Lion)";
    case EST_OPT_SGD: return "optimizer step (SGD)";
    case EST_OPT_SGD_MOMENTUM: return "optimizer step (SGD, momentum)";
    case EST_OPT_PAGED_ADAMW_32BIT: return "optimizer step (paged 32-bit AdamW)";
    case EST_OPT_ADAFACTOR_BETA1: return "optimizer step (Adafactor, first moment)";
    case EST_OPT_ADAMW_4BIT: return "optimizer step (torchao 4-bit AdamW)";
    }
    return "optimizer step";
}

