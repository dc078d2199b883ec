/* What every ZeRO stage's optimizer step allocates (seam_deepspeed.h): Adam's
 * state at the first step, the step's temporaries, and the compute-dtype
 * gradients cast to fp32. The set-up (seam_deepspeed_init.c: stage 0's dummy
 * step), stages 1-2 (seam_deepspeed_zero12.c) and stage 3 (seam_deepspeed.c)
 * call it; it calls none of them. The Trainer's two parameter groups are
 * decided here too (ds12_two_groups), for the set-up and the step alike. */
#include "optimizers.h"
#include "seam_deepspeed.h"

/* The HF Trainer's second parameter group: norms and biases. */
bool ds12_no_decay(const est_mparam *p) { return p->kind == EST_PK_NORM || p->kind == EST_PK_LINEAR_BIAS; }

/* The HF Trainer's optimizer (a config without "optimizer") comes in two
 * parameter groups, weight decay and not (transformers trainer.py
 * create_optimizer, get_decay_parameter_names: biases and norms in the
 * second), and DeepSpeed keeps one bit16 group per optimizer group but one
 * grads_in_partition for all (copy_grads_in_partition sums
 * params_in_partition over the groups). step() drops a group's views of it
 * (averaged_gradients[i] = None) only when that group's turn comes, so the
 * second group's views hold the whole buffer through the first group's
 * optimizer step (0.19.8 stage_1_and_2.py step; traced on the CPU with
 * DeepSpeed 0.19.8 and transformers 5.17's Trainer: 24 bytes per parameter at
 * the foreach step, bf16, one rank). DeepSpeed's own optimizer gets one list
 * (integrations/deepspeed.py DummyOptim(params=model_parameters)), and so
 * does a script that passes one list (ds.client_one_group). */
bool ds12_two_groups(est_sim *s, const ds_state *d) {
    if (!s->run->ds.client_optimizer || s->run->ds.client_one_group) return false;
    bool decay = false, no_decay = false;
    for (int i = 0; i < d->n_refs; i++) {
        const est_mparam *p = est_sim_param(s, d->refs[i].inst, d->refs[i].p);
        if (!p->trainable) continue;
        if (ds12_no_decay(p)) no_decay = true;
        else decay = true;
    }
    return decay && no_decay;
}

/* The client optimizer is torch's fused AdamW: a config without "optimizer"
 * (transformers 5.17 integrations/deepspeed.py deepspeed_optim_sched:
 * trainer.create_optimizer(), else DummyOptim) whose implementation is the
 * Trainer's (optimizers.h est_optimizer_adamw_fused: adamw_torch_fused by
 * default from transformers 4.54 with torch 2.8). DeepSpeed 0.19.8 engine.py
 * _configure_optimizer keeps it as basic_optimizer and the ZeRO optimizer
 * steps it on its fp32 partitions (stage_1_and_2.py line 584:
 * param_group['params'] = [single_partition_of_fp32_groups[i]]; stage3.py
 * _optimizer_step, lines 1235-1262: [fp32_partitioned_groups_flat[sub_group]]),
 * so the state, step counter included, is per flat fp32 tensor. */
static bool client_fused(const est_sim *s) {
    return s->run->ds.client_optimizer && est_optimizer_adamw_fused(s->run);
}

/* The flat fp32 tensors one step covers: a stage-3 sub-group is one; stages
 * 0-2 keep one per optimizer group, two with the Trainer's (ds12_two_groups). */
static int64_t fp32_tensors(est_sim *s, const ds_state *d) {
    return s->run->zero_stage == 3 || !ds12_two_groups(s, d) ? 1 : 2;
}

void ds_adam_state(est_sim *s, ds_state *d, int64_t elems) {
    if (s->run->optimizer == EST_OPT_ADAMW_8BIT) {
        /* bitsandbytes' AdamW8bit as DeepSpeed's client optimizer: ZeRO hands
         * it each fp32 group partition as one tensor (stage3.py _optimizer_step,
         * 0.16.5), whose state it makes at the first step as for any tensor
         * (est_optimizer_tensor_state: uint8 moments and block absmax, fp32
         * moments below min_8bit_size) */
        est_tensor_state ts;
        est_optimizer_tensor_state(s->run, elems, 0, 4, &ts);
        for (int j = 0; j < ts.count; j++) est_sim_alloc(s, EST_CAT_OPTIMIZER, ts.device[j], "8-bit AdamW state", 0);
        return;
    }
    /* torch 2.11 optim/adam.py _init_group: the fused step counter (a 512-byte
     * block on the device, EST_ADAMW_FUSED_STEP_BYTES) before exp_avg and
     * exp_avg_sq */
    if (d->adam_elems && client_fused(s))
        for (int64_t t = fp32_tensors(s, d); t > 0; t--)
            est_sim_alloc(s, EST_CAT_OPTIMIZER, EST_ADAMW_FUSED_STEP_BYTES, "AdamW step counter", 0);
    for (int64_t i = 0; i < d->adam_elems; i++) est_sim_alloc(s, EST_CAT_OPTIMIZER, elems * 4, "Adam state", 0);
}

/* The optimizer's step on an fp32 group of `elems`: Adam's state at its first
 * step (zeros_like, both DeepSpeed's FusedAdam and torch's AdamW); the fused
 * kernels (DeepSpeed's FusedAdam, torch's _fused_adamw_) allocate nothing
 * more, torch's foreach AdamW one temporary of the group (torch/optim/adamw.py
 * _multi_tensor_adamw: _foreach_sqrt(exp_avg_sqs)). */
void ds_optimizer_step(est_sim *s, ds_state *d, int64_t elems, bool first) {
    if (first) ds_adam_state(s, d, elems);
    if (d->adam_elems && s->run->ds.client_optimizer && !client_fused(s))
        ds_transient(s, EST_CAT_WORKSPACE, elems * 4, "AdamW foreach sqrt", 0);
}

int32_t ds_to_fp32(est_sim *s, ds_state *d, est_category cat, int64_t elems, const char *what, const char *name) {
    const int32_t low = est_sim_alloc(s, cat, elems * d->c, what, 0);
    if (d->c == 4) return low; /* .float() / .to(float32) of an fp32 tensor returns it */
    const int32_t f32 = est_sim_alloc(s, cat, elems * 4, name, 0);
    est_sim_release(s, low);
    return f32;
}

void ds_transient(est_sim *s, est_category cat, int64_t bytes, const char *name, int stream) {
    if (bytes > 0) est_sim_release(s, est_sim_alloc(s, cat, bytes, name, stream));
}
