/* The dtypes each framework runs the modeling code in (seam_regime.h): each
 * seam's regime hook (seam_hf.c, seam_deepspeed.c, seam_fsdp.c name them in
 * their est_seam) and the block's regime the time ledger reads (work.c). */
#include "seam_regime.h"

#include "hf_modeling.h"
#include "lora.h"
#include "peft.h"
#include "stack.h"

/* HF Trainer (plain or DDP): the model as loaded, autocast under mixed precision. */
void est_hf_regime(const est_run *run, est_regime *block, est_regime *ends) {
    const int c = (int)est_compute_dtype_bytes(run->precision);
    const bool mixed = est_has_master(run->precision), lora = est_peft_on(run); /* base frozen */
    /* adapters fp32 (PEFT's autocast_adapter_dtype), or kept in the base's
     * bf16 under pure bf16 (--lora-dtype bf16, as torchtune trains them) */
    est_regime g = {.act = c, .resid = c, .autocast = mixed, .weight = c, .train_base = !lora,
                    .adapter = (int)est_lora_weight_bytes(run)};
    if (!lora && mixed) g.resid = g.weight = 4;  /* autocast over fp32 weights */
    if (run->precision == EST_PREC_FP32) g.resid = g.weight = 4;
    /* QLoRA: prepare_model_for_kbit_training casts every parameter left
     * unquantized (norms, embedding, LM head) to fp32 (peft utils/other.py). */
    if (lora && run->quant != EST_QUANT_NONE) g.resid = g.weight = 4;
    *block = g;
    *ends = g;
}

/* DeepSpeed: the engine casts the module to the compute dtype. */
void est_ds_regime(const est_run *run, est_regime *block, est_regime *ends) {
    const int c = (int)est_compute_dtype_bytes(run->precision);
    /* LoRA: the engine's module.bfloat16() casts the adapters too (and the
     * norms prepare_model_for_kbit_training made fp32); a 4-bit base is no
     * floating-point tensor and stays as bitsandbytes packed it. */
    est_regime g = {.act = c, .resid = c, .autocast = false, .weight = c, .train_base = !est_lora_on(run),
                    .adapter = c};
    /* ZeRO-3's F.linear (zero.Init's zero3_linear_wrap, memory_efficient_linear
     * on by default; 0.19.8 installs it without zero.Init too, stack.h): a
     * frozen base Linear keeps its input for backward as a trained one does */
    g.linear_saves_input = run->zero_stage == 3 && (run->zero_init || run->stack->ds_linear_wrap_without_init);
    *block = g;
    *ends = g;
}

/* LoRA's adapters flattened with their decoder layer's frozen base under
 * FSDP1 (use_orig_params=True): the FlatParameter requires grad when any of
 * its parameters does (_flat_param.py _init_flat_param_and_metadata: "permit
 * non-uniform requires_grad"), and every parameter of the layer is a view of
 * it in forward (_use_unsharded_views: nn.Parameter(view, requires_grad=
 * flat_param.requires_grad)): autograd computes the frozen weights' gradients
 * too, into the unsharded flat gradient (torch 2.6-2.15). */
bool est_fsdp_base_views_need_grad(const est_run *run) {
    return est_lora_on(run) && run->fsdp_version == EST_FSDP1 && run->fsdp_lora_wrap == EST_FSDP_LORA_WRAP_LAYER;
}

/* MixedPrecision(param_dtype=c) casts the module for its forward (FSDP1 per
 * unit, FSDP2 per all-gather); no autocast over it: Linear outputs and the
 * residual stream are in c, as are LoRA's adapters gathered in c. Without a
 * policy (fp32, pure bf16) the adapters compute in their own dtype. */
void est_fsdp_regime(const est_run *run, est_regime *block, est_regime *ends) {
    const int c = (int)est_compute_dtype_bytes(run->precision);
    const int a = est_has_master(run->precision) ? c : (int)est_lora_weight_bytes(run);
    est_regime g = {.act = c, .resid = c, .autocast = false, .weight = c,
                    .train_base = !est_lora_on(run), .adapter = a};
    *ends = g;
    g.train_base = g.train_base || est_fsdp_base_views_need_grad(run);
    *block = g;
}

est_regime est_block_regime(const est_run *run) {
    est_regime block, ends;
    switch (run->framework) {
    case EST_FW_HF: est_hf_regime(run, &block, &ends); return block;
    case EST_FW_DEEPSPEED: est_ds_regime(run, &block, &ends); return block;
    case EST_FW_FSDP: est_fsdp_regime(run, &block, &ends); return block;
    case EST_FW_FTRAIN: break;
    }
    return est_regime_of(run);
}
