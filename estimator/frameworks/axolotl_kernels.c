#include "axolotl_kernels.h"

#include <stdio.h>
#include <string.h>

#include "axolotl_keys.h"
#include "json_util.h"
#include "kernels.h"
#include "lora.h"

static const char *const LORA_KEYS[3] = {"lora_qkv_kernel", "lora_o_kernel", "lora_mlp_kernel"};
static const est_kernel LORA_KERNELS[3] = {EST_KERNEL_LORA_QKV, EST_KERNEL_LORA_O, EST_KERNEL_LORA_MLP};

static const cJSON *item(const cJSON *root, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

static bool is_true(const cJSON *root, const char *key) {
    const cJSON *it = item(root, key);
    return it && (cJSON_IsTrue(it) || (cJSON_IsString(it) && it->valuestring && !strcmp(it->valuestring, "true")));
}

/* schemas/config.py check_auto_enable_lora_kernels: with adapter lora or
 * qlora, no rl, none of lora_{mlp,qkv,o,embedding}_kernel set, not 8-bit
 * LoRA, no trust_remote_code, and on one GPU, without FSDP or with FSDP2,
 * axolotl turns the kernels on. Two conditions need what ftest reads later:
 * MoE models are skipped below torch 2.9 (ftest's stacks are older), and an
 * FSDP1 YAML is taken as the multi-GPU run it is written for. */
static bool auto_enabled(const cJSON *root, const est_run *run) {
    static const char *const SET[] = {"lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel",
                                      "lora_embedding_kernel"};
    const cJSON *adapter = item(root, "adapter");
    if (!cJSON_IsString(adapter) || !adapter->valuestring) return false;
    const bool lora = !strcmp(adapter->valuestring, "lora");
    if (!lora && strcmp(adapter->valuestring, "qlora")) return false;
    const cJSON *rl = item(root, "rl"); /* data.get("rl"): any truthy value */
    if ((rl && !cJSON_IsFalse(rl) && !(cJSON_IsString(rl) && rl->valuestring && !rl->valuestring[0])) ||
        is_true(root, "trust_remote_code") || (lora && is_true(root, "load_in_8bit")))
        return false;
    for (size_t i = 0; i < sizeof SET / sizeof SET[0]; i++)
        if (item(root, SET[i])) return false;
    if (run->model.num_experts > 0) return false;
    return !(run->framework == EST_FW_FSDP && run->fsdp_version == EST_FSDP1);
}

/* One LoRA kernel asked for (explicitly or by auto-enable): axolotl patches a
 * module only when every projection it fuses has an adapter
 * (monkeypatch/lora_kernels.py can_patch_*), and leaves it as it is
 * otherwise; auto-enabled kernels are not tried where ftest does not model
 * them (Phi-3's fused projections). */
static void lora_kernel(est_run *run, int i, bool automatic, char *used, size_t usedlen) {
    const est_kernel k = LORA_KERNELS[i];
    const uint32_t need = est_kernel_lora_targets(k);
    char label[96];
    if (!est_lora_on(run) || (run->lora.targets & need) != need) {
        snprintf(label, sizeof label, "%s (unpatched: no adapter on every projection)", LORA_KEYS[i]);
        if (!automatic) est_axolotl_note(used, usedlen, label);
        return;
    }
    if (automatic && run->model.fused_qkv && k != EST_KERNEL_LORA_O) return;
    run->kernels |= EST_KERNEL_BIT(k);
    snprintf(label, sizeof label, "%s%s", LORA_KEYS[i], automatic ? " (auto-enabled)" : "");
    est_axolotl_note(used, usedlen, label);
}

/* flash_attn_fuse_mlp (loaders/patch_manager.py
 * _apply_llama_flash_attn_patches): LlamaMLP becomes xformers' packed SwiGLU
 * for model_type llama with a flash-attn attention; refused with an adapter
 * (schemas/validation.py check_fused_lora). xformers with its swiglu_packedw
 * operator is taken as installed (axolotl skips the patch without it). */
static int fused_mlp(const cJSON *root, est_run *run, char *used, size_t usedlen, char *err, size_t errlen) {
    if (!is_true(root, "flash_attn_fuse_mlp")) return 0;
    if (item(root, "adapter"))
        return ft_errorf(err, errlen, "flash_attn_fuse_mlp with an adapter: axolotl refuses it (\"Fused modules "
                                      "are not supported with LoRA/QLoRA\")");
    if (run->model.arch != FT_ARCH_LLAMA || run->attention != EST_ATTN_FLASH) {
        est_axolotl_note(used, usedlen, "flash_attn_fuse_mlp (unpatched: Llama with flash attention only)");
        return 0;
    }
    run->kernels |= EST_KERNEL_BIT(EST_KERNEL_FUSED_MLP);
    est_axolotl_note(used, usedlen, "flash_attn_fuse_mlp");
    return 0;
}

/* gradient_checkpointing: offload is activation_offloading: true with
 * gradient_checkpointing: true (schemas/validation.py
 * check_gradient_checkpointing_w_offload). Under an adapter the loader still
 * checkpoints the decoder layers (loaders/model.py: gradient_checkpointing_enable
 * with the YAML's kwargs) and the Trainer runs each step inside TRL's
 * OffloadActivations (core/trainers/mixins/activation_checkpointing.py): what
 * autograd saves outside the checkpoints goes to pinned host memory, as
 * torch's save_on_cpu (docs/method.md says what differs). */
static int offload(const cJSON *root, const est_given *given, est_run *run, char *used, size_t usedlen, char *err,
                   size_t errlen) {
    const cJSON *gc = item(root, "gradient_checkpointing");
    const bool via_gc = cJSON_IsString(gc) && gc->valuestring && !strcmp(gc->valuestring, "offload");
    if (!via_gc && !is_true(root, "activation_offloading")) return 0;
    if (!via_gc && !(gc && (cJSON_IsTrue(gc) || cJSON_IsString(gc))))
        return ft_errorf(err, errlen, "activation_offloading needs gradient_checkpointing (axolotl refuses it)");
    if (!item(root, "adapter"))
        return ft_errorf(err, errlen, "not modelled (axolotl %s): activation offloading of a full fine-tune "
                                      "(each layer in torch's checkpoint_wrapper beside TRL's offloader)",
                         EST_AXOLOTL_VERSION);
    if (given->checkpointing && run->checkpointing == EST_CKPT_NONE) return 0;
    run->activation_offload = true;
    run->offload_stash = 5; /* OffloadActivations(max_fwd_stash_size=5), use_streams=True */
    est_axolotl_note(used, usedlen, via_gc ? "offload (TRL activation offloading)" : "activation_offloading");
    return 0;
}

/* CutCrossEntropyPlugin (integrations/cut_cross_entropy): on whenever the
 * plugin is listed, unless cut_cross_entropy: false (args.py: default True);
 * the model's forward then calls linear_cross_entropy on the hidden states
 * and the LM head's weight (cut_cross_entropy/transformers/patch.py). */
static void cut_cross_entropy(const cJSON *root, const est_given *given, est_run *run, char *used, size_t usedlen) {
    const cJSON *plugins = item(root, "plugins"), *p;
    bool listed = false;
    cJSON_ArrayForEach(p, plugins)
        if (cJSON_IsString(p) && p->valuestring && strstr(p->valuestring, "CutCrossEntropyPlugin")) listed = true;
    if (!listed || cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "cut_cross_entropy")) || given->loss) return;
    run->loss = EST_LOSS_CCE;
    est_axolotl_note(used, usedlen, "plugins: CutCrossEntropyPlugin");
}

int est_axolotl_kernels(const cJSON *root, const est_given *given, est_run *run, char *used, size_t usedlen,
                        char *err, size_t errlen) {
    if (offload(root, given, run, used, usedlen, err, errlen) < 0) return -1;
    cut_cross_entropy(root, given, run, used, usedlen);
    if (given->kernels) return 0;
    const bool automatic = auto_enabled(root, run);
    for (int i = 0; i < 3; i++) {
        if (is_true(root, LORA_KEYS[i])) lora_kernel(run, i, false, used, usedlen);
        else if (automatic) lora_kernel(run, i, true, used, usedlen);
    }
    return fused_mlp(root, run, used, usedlen, err, errlen);
}
