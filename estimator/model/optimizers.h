/* Optimizer state and step temporaries by optimizer, tensor by tensor, for the
 * HF Trainer's optimizers (transformers 4.40 Trainer.get_optimizer_cls_and_kwargs):
 *   adamw            torch.optim.AdamW, foreach ("adamw_torch") or fused
 *                    ("adamw_torch_fused": the Trainer's default on newer stacks,
 *                    est_optimizer_adamw_fused)
 *   adamw-8bit       bitsandbytes AdamW(optim_bits=8) ("adamw_bnb_8bit")
 *   paged-adamw-8bit the same with is_paged=True ("paged_adamw_8bit")
 *   paged-adamw-32bit bitsandbytes AdamW(optim_bits=32, is_paged=True) ("paged_adamw_32bit")
 *   adafactor        transformers.optimization.Adafactor, beta1=None ("adafactor")
 *   adafactor-beta1  the same with beta1 set: a first moment too
 *   lion             bitsandbytes Lion(optim_bits=32) ("lion_32bit")
 *   sgd              torch.optim.SGD without momentum, sgd-momentum with it.
 * bitsandbytes 0.44-0.45 (optim/optimizer.py Optimizer2State.init_state,
 * get_state_buffer). docs/method.md ("Optimizers") derives each term. */
#ifndef EST_OPTIMIZERS_H
#define EST_OPTIMIZERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run_desc.h"

/* bitsandbytes: tensors with fewer elements keep 32-bit state (min_8bit_size). */
#define EST_BNB_MIN_8BIT_ELEMS 4096
/* bitsandbytes >= 0.44: one fp32 absmax per 256 elements of each 8-bit state
 * (0.43 and earlier: 2048). */
#define EST_BNB_STATE_BLOCK 256
/* bitsandbytes get_state_buffer: state of tensors with at least 1e5 elements is
 * paged (cudaMallocManaged) when is_paged. */
#define EST_BNB_PAGED_MIN_ELEMS 100000
/* torchao 0.19 optim/adam.py AdamW4bit: block_size=128; _new_buffer
 * quantizes a state only when numel >= 4096 and numel % block_size == 0,
 * else zeros_like(p). */
#define EST_AO4_BLOCK 128
#define EST_AO4_MIN_ELEMS 4096

/* A 0-d float32 tensor on the GPU as the caching allocator holds it: 4 bytes
 * asked for, a block of kMinBlockSize = 512 bytes given, and the block is what
 * memory_allocated() counts (PyTorch v2.6.0 c10/cuda/CUDACachingAllocator.cpp
 * round_size, lines 2063-2074: `if (size < kMinBlockSize) return
 * kMinBlockSize`; alloc_found_block adds block->size to allocated_bytes; the
 * same in 2.11; estimator/ledger/caching_allocator.c EST_ALLOC_MIN_BLOCK). */
#define EST_DEVICE_SCALAR_BYTES 512
/* torch's fused AdamW keeps its step counter on the parameter's device: a 0-d
 * float32 tensor per parameter (torch 2.11 optim/adam.py _init_group, lines
 * 166-176: torch.zeros((), dtype=_get_scalar_dtype(is_fused=True),
 * device=p.device) when capturable or fused, else torch.tensor(0.0) on the
 * host), so one 512-byte block each. */
#define EST_ADAMW_FUSED_STEP_BYTES EST_DEVICE_SCALAR_BYTES

/* Trainable tensors with one shape, `count` of them; cols == 0 is a vector. */
typedef struct est_tensor_group {
    int64_t rows, cols, count;
} est_tensor_group;

#define EST_MAX_TENSOR_GROUPS 32

/* The run's trainable tensors: every weight, bias and norm of the model, or
 * the adapters' A and B under LoRA. Returns the number of groups. */
int est_trainable_tensors(const est_run *run, est_tensor_group out[EST_MAX_TENSOR_GROUPS]);

typedef struct est_optimizer_bytes {
    int64_t state_bytes;         /* resident on the GPU from the first step */
    int64_t paged_bytes;         /* paged state: unified memory, counted on the host */
    int64_t largest_paged_bytes; /* one tensor's paged state, on the GPU while it is stepped */
    int64_t step_bytes;          /* temporaries during the step */
} est_optimizer_bytes;

/* One trainable tensor's optimizer state: the device tensors it keeps, in
 * order, its paged state (unified memory, on the host), and the step's
 * temporaries: `foreach_bytes` live together for every tensor during a foreach
 * step, `single_bytes` for this tensor alone while it is stepped. */
typedef struct est_tensor_state {
    int64_t device[4];
    int count;
    int64_t paged_bytes;
    int64_t foreach_bytes;
    int64_t single_bytes;
} est_tensor_state;

void est_optimizer_tensor_state(const est_run *run, int64_t rows, int64_t cols, int64_t param_bytes,
                                est_tensor_state *out);

/* State and temporaries for trainable parameters of `param_bytes` bytes each. */
void est_optimizer_bytes_of(const est_run *run, int64_t param_bytes, est_optimizer_bytes *out);

/* Temporaries of stepping one tensor of n elements on its own (the
 * single-tensor code path, as --optimizer-in-backward runs it): AdamW's
 * `exp_avg_sq.sqrt() / bias_correction2_sqrt` (two n-sized tensors at once,
 * torch/optim/adamw.py _single_tensor_adamw), Adafactor's as above, none for
 * the fused bitsandbytes kernels and SGD. */
int64_t est_optimizer_tensor_step_bytes(const est_run *run, int64_t n, int64_t param_bytes);

/* Device bytes read and written per trainable parameter by the step (HF). */
double est_optimizer_traffic_per_param(const est_run *run, double param_bytes);

/* torch.optim.AdamW runs fused (fused=True: one _fused_adamw_ launch per
 * multi-tensor chunk, no step temporaries, a device `step` per parameter):
 * named so (est_run.adamw_impl), or by default when the HF Trainer makes it
 * on a stack whose default optim is adamw_torch_fused (stack.h
 * trainer_default_fused). Foreach otherwise, and for frameworks that do not
 * step torch's AdamW (EST_FEAT_FUSED_ADAMW). Under DeepSpeed it is the client
 * optimizer's implementation, which runs only when the config names no
 * optimizer (seam_deepspeed_optim.c); under FSDP the Trainer's optimizer over
 * the shards (seam_fsdp.c). */
bool est_optimizer_adamw_fused(const est_run *run);

/* One multi-tensor op of a step: the lists it walks, and whether its tensors
 * are the 0-d step counters (one element each) rather than the parameters. */
typedef struct est_mt_op {
    int lists;
    bool scalars;
} est_mt_op;

/* torch AdamW's update after the clip, over tensors of w bytes: the passes
 * of w bytes it reads and writes (7 fused, 21 foreach), and its multi-tensor
 * ops: their count, and the ops in *ops. */
double est_adamw_update_passes(const est_run *run);
int est_adamw_update_ops(const est_run *run, const est_mt_op **ops);

/* Whether torch's foreach AdamW runs its decoupled weight decay pass
 * (_foreach_mul_(params, 1 - lr * weight_decay): read and write each
 * parameter). torch 2.11 optim/adam.py _multi_tensor_adam (lines 689-692)
 * runs it only `if weight_decay != 0`. The HF Trainer passes its
 * TrainingArguments.weight_decay to every parameter group, and that defaults
 * to 0.0 (transformers 5.17 training_args.py; 0.0 in 4.x too), as axolotl's
 * does: no pass under --framework hf's Trainer, nor under DeepSpeed when
 * it steps the Trainer's AdamW (ds.client_optimizer, two groups). A plain loop's
 * torch.optim.AdamW keeps torch's own default, weight_decay=1e-2, and the
 * other frameworks step their own way: the pass is run. */
bool est_optimizer_decays_weights(const est_run *run);

/* What a fused step allocates besides: under fp16-mixed the GradScaler hands
 * the optimizer found_inf = sum(found_inf_per_device), a new 0-d fp32 tensor
 * (torch 2.11 amp/grad_scaler.py step, _step_supports_amp_scaling), and
 * grad_scale None, as the Trainer's clip has unscaled the gradients already
 * (OptState.UNSCALED); nothing under bf16. EST_DEVICE_SCALAR_BYTES (its 512-byte block) or 0. */
int64_t est_optimizer_step_scalar_bytes(const est_run *run);

/* "foreach" | "fused" -> est_adamw_impl; 0 or -1 with one line. */
int est_adamw_impl_parse(const char *s, est_adamw_impl *out, char *err, size_t errlen);

/* The label of the optimizer step's moment: "optimizer step (foreach AdamW)", ... */
const char *est_optimizer_step_label(const est_run *run);

/* The optimizers other than adamw and sgd are modelled for --framework hf
 * only; 0 or -1 with one line. */
int est_optimizer_validate(const est_run *run, char *err, size_t errlen);

#endif
