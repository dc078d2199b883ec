/* The frameworks ftest models, as the rest of the estimator may ask about
 * them: one entry per framework (fw_registry.c) saying how it runs the
 * modeling code (dtypes), which features its profile models, and how it names
 * itself. Code outside estimator/frameworks/ asks a question by capability or
 * by feature here, never compares the framework enum; adding a framework adds
 * its seam (autograd.h), its case in step_build.c, and its entry here.
 *
 * This module includes run_desc.h and common/ only, so that model/ and the
 * ledgers can include it without an include cycle. */
#ifndef EST_FW_REGISTRY_H
#define EST_FW_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "run_desc.h"

/* Features a framework's profile models or not; each has one message for
 * the frameworks that do not (fw_registry.c), naming those that do. */
typedef enum {
    EST_FEAT_LORA,              /* LoRA adapters (PEFT) */
    EST_FEAT_PEFT_METHOD,       /* PEFT's other methods and LoRA variants */
    EST_FEAT_PLAIN_LOOP,        /* a plain PyTorch loop instead of the Trainer */
    EST_FEAT_OPTIMIZER,         /* an optimizer other than AdamW and SGD */
    EST_FEAT_RL,                /* TRL's preference trainers */
    EST_FEAT_MODULES_TO_SAVE,   /* PEFT's modules_to_save */
    EST_FEAT_NON_REENTRANT,     /* non-reentrant activation checkpointing */
    EST_FEAT_ZERO,              /* any sharding stage (--zero 1-3) */
    EST_FEAT_ZERO1,             /* a stage that shards the optimizer states only */
    EST_FEAT_OFFLOAD,           /* any CPU offload */
    EST_FEAT_OFFLOAD_OPTIMIZER, /* offloading the optimizer without the parameters */
    EST_FEAT_OFFLOAD_SGD,       /* SGD as the offloaded optimizer */
    EST_FEAT_CKPT_SELECTIVE,    /* selective recompute */
    EST_FEAT_FP16_MIXED,        /* fp16 mixed precision */
    EST_FEAT_SDPA,              /* PyTorch's scaled_dot_product_attention */
    EST_FEAT_ARCH,              /* the run's architecture (limits: the blocks it implements) */
    EST_FEAT_HF_ONLY_STACK,     /* a stack read without DeepSpeed or FSDP versions */
    EST_FEAT_SINGLE_DEVICE,     /* single-device recipes: optimizer in backward, activation offload */
    EST_FEAT_DEEPSPEED_CONFIG,  /* a record's config.deepspeed */
    EST_FEAT_FP8,               /* FP8 linears (torchao Float8Linear, --fp8) */
    EST_FEAT_FP8_ALL_GATHER,    /* their weights all-gathered in fp8 (FSDP2) */
    EST_FEAT_CKPT_POLICY,       /* op-level selective checkpointing, every N-th block checkpointed */
    EST_FEAT_COMPILE,           /* torch.compile of the blocks */
    EST_FEAT_PARTIAL,           /* partial training: --trainable, unfrozen_parameters */
    EST_FEAT_TP,                /* tensor parallelism (--tp, torchtitan's plan over FSDP2) */
    EST_FEAT_LORA_BF16,         /* LoRA adapters kept in bf16 (--lora-dtype bf16) */
    EST_FEAT_FSDP_OPTIONS,      /* FSDP's own settings (version, reduce dtype, prefetch, LoRA wrap) */
    EST_FEAT_LOAD_DTYPE,        /* a loaded dtype the framework trains from (--load-dtype bf16) */
    EST_FEAT_FUSED_ADAMW,       /* torch's fused AdamW as the optimizer (optimizers.h) */
    EST_FEAT_CHUNKED_OUTPUT,    /* torchtune's chunked output loss: the LM head read 8 times, its
                                   gradients summed by autograd before the seam's hook */
    EST_FEAT_COUNT
} est_fw_feature;

/* One strategy a search tries for a framework (search/strategy.h copies it). */
typedef struct est_fw_strategy {
    const char *label; /* "ZeRO-2 + offload + ckpt" */
    est_framework framework;
    int zero;
    est_offload offload;
    est_checkpointing checkpointing;
} est_fw_strategy;

typedef struct est_fw_info {
    /* The modeling code runs under torch.autocast over fp32 master weights
     * (plain PyTorch): the embedding output, hence the residual stream, is
     * fp32 and every Linear casts its input. A framework that casts the
     * module itself (DeepSpeed's module.half()/bfloat16(), FSDP's
     * MixedPrecision param_dtype) does not. */
    bool autocast_over_master;
    /* A quantized base goes through PEFT's prepare_model_for_kbit_training,
     * which casts every parameter left unquantized to fp32 (peft 0.13
     * utils/other.py); sharded QLoRA (TRL's is_sharded_qlora) skips it. */
    bool kbit_prepare_fp32;
    /* LoRA's fp32 adapters are gathered in the compute dtype (FSDP's
     * MixedPrecision), so autocast leaves the compute-dtype input alone. */
    bool adapters_in_compute_dtype;
    /* Runs Transformers' modeling code on the PyTorch stack the report names
     * (torch, transformers, ...): the activations are est_block_saved's. */
    bool torch_stack;
    /* Allocates through PyTorch's caching allocator (allocator_ledger.h), on
     * a CUDA context; without it (ftrain's own arena) allocated is reserved
     * and the memory needs no fitted constant. */
    bool caching_allocator;
    /* NCCL communicators each rank opens for a step of more than one rank
     * (device_mem.h est_nccl_in_force); 0 means one: torch's default process
     * group, ProcessGroupNCCL's one per device (DDP, FSDP, the Trainer). */
    int nccl_communicators;
    /* At a ZeRO stage, each gradient is copied into its reduce bucket (or at
     * stage 3 the contiguous gradient buffer) as its hook fires (DeepSpeed). */
    bool zero_grad_copy;
    /* Its host memory at load depends on the ranks per node, not on the
     * world alone (FSDP: seam_fsdp.c host_bytes). */
    bool memory_by_node;
    /* Its step time is priced with its own fitted profile, whatever the
     * constants the caller holds (ftrain). */
    bool own_time_profile;
    /* Runs on this machine's CPU, which `--gpu cpu` names (ftrain's CPU
     * backend, docs/trainer.md). */
    bool cpu_device;
    /* The attention it runs unless asked for another: ftrain's own flash
     * kernel (trainer/); -1 where the run's default stands. */
    int attention_default;
    /* The features modelled, one bit per est_fw_feature. */
    unsigned features;
    /* Limits within a feature it models: 0, or -1 with a message. NULL: none. */
    int (*limits)(const est_run *run, est_fw_feature f, const char *subject, char *err,
                  size_t errlen);
    /* The framework a run moves to when a search adds ZeRO or offload (HF's
     * DDP has neither: DeepSpeed); its own elsewhere. */
    est_framework sharded_by;
    /* The strategies a search tries (NULL-label terminated), and how its
     * advice names ZeRO-3 and offloading everything (NULL: ZeRO's words). */
    const est_fw_strategy *strategies;
    const char *zero3_label, *offload_all_label;
    /* The strategy as the report names it ("DeepSpeed ZeRO-3, full checkpointing"). */
    void (*describe)(const est_run *run, char *buf, size_t n);
    /* A note on how the model is built, after the report's stack line, or "". */
    const char *(*build_note)(const est_run *run);
} est_fw_info;

/* The framework a run gets when it names none. */
est_framework est_fw_default(void);

/* The framework a run that names none moves to when it asks for what the HF
 * Trainer's path models and the default does not: LoRA and PEFT's other
 * methods, an optimizer other than AdamW and SGD, partial training, ZeRO 0
 * without offload (plain DDP). */
est_framework est_fw_trainer(void);

/* Every framework ftest models, in the registry's order; returns their count. */
size_t est_fw_all(const est_framework **out);

/* Whether the run frees gathered parameters after record_stream on side
 * streams across several ranks (DeepSpeed ZeRO-3 over more than one rank):
 * the step holds those frees pending until DeepSpeed's throttles pass them
 * (seam_deepspeed_lag.c), the ranks' peaks spread, and calibrate/ fits the
 * ZeRO-3 collectives' time constants from these runs. */
bool est_fw_stream_ordered_frees(const est_run *run);

/* The entry of the run's framework, and of a framework. */
const est_fw_info *est_fw_of(const est_run *run);
const est_fw_info *est_fw_info_of(est_framework fw);

/* 0 when the run's framework models feature f, else -1 with the feature's
 * message; `subject` fills the message's %s (the optimizer's name, "--peft
 * ia3", ...; NULL where it has none). */
int est_fw_models(const est_run *run, est_fw_feature f, const char *subject, char *err,
                  size_t errlen);

/* The lowest sharding stage (0-3) at which the run's framework models
 * feature f with the run's other settings (LoRA under DeepSpeed: 1), or -1
 * when none does. */
int est_fw_first_stage(const est_run *run, est_fw_feature f);

/* Whether the run's framework has feature f at all (its limits unasked). */
bool est_fw_has(const est_run *run, est_fw_feature f);

/* The strategy's name into buf (n bytes); returns buf. */
const char *est_fw_describe(const est_run *run, char *buf, size_t n);

/* The strategies a search tries for this run: the framework's, or FSDP2's
 * (reshard_after_forward instead of FSDP1's strategy names). */
const est_fw_strategy *est_fw_strategies_of_run(const est_run *run);

#endif
