/* The run description: everything that decides a training step's memory and
 * time. Built from flags (options.c), from a record's "config" (record.c), or
 * by the strategy search; consumed by the framework profiles.
 *
 * Its types, names and accessors only: the modules of one feature (lora,
 * quant, optimizers) build on this header, and run.h, which validates a whole
 * run by calling each feature's checks, sits above them (tests/structure.c:
 * no include cycles). */
#ifndef EST_RUN_DESC_H
#define EST_RUN_DESC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu.h"
#include "model_config.h"
#include "run_vocab.h"
#include "stack.h"

/* Enums are append-only: their names are persisted in records. */
/* The default tight margin: 5% of the card. Allocator fragmentation beyond
 * the modelled reserve and library versions move a measured peak by a few
 * percent (docs/validation.md lists the signed errors), so a fit closer than
 * this is worth a warning rather than a plain yes. */
#define EST_TIGHT_MARGIN_DEFAULT 0.05

/* The run vocabulary (precision, offload, checkpointing, attention, loss,
 * optimizer) is defined once, in common/run_vocab.h, for the estimator and
 * the trainer; the estimator's code spells it with its own prefix. */
typedef ft_precision est_precision;
#define EST_PREC_FP32 FT_PREC_FP32
#define EST_PREC_BF16_MIXED FT_PREC_BF16_MIXED
#define EST_PREC_FP16_MIXED FT_PREC_FP16_MIXED
#define EST_PREC_BF16 FT_PREC_BF16
typedef ft_offload est_offload;
#define EST_OFFLOAD_NONE FT_OFFLOAD_NONE
#define EST_OFFLOAD_OPTIMIZER FT_OFFLOAD_OPTIMIZER
#define EST_OFFLOAD_OPTIMIZER_PARAMS FT_OFFLOAD_OPTIMIZER_PARAMS
typedef ft_checkpointing est_checkpointing;
#define EST_CKPT_NONE FT_CKPT_NONE
#define EST_CKPT_SELECTIVE FT_CKPT_SELECTIVE
#define EST_CKPT_SELECTIVE_OP FT_CKPT_SELECTIVE_OP
#define EST_CKPT_FULL FT_CKPT_FULL
typedef ft_attention est_attention;
#define EST_ATTN_EAGER FT_ATTN_EAGER
#define EST_ATTN_SDPA FT_ATTN_SDPA
#define EST_ATTN_FLASH FT_ATTN_FLASH
typedef ft_loss est_loss;
#define EST_LOSS_STANDARD FT_LOSS_STANDARD
#define EST_LOSS_CHUNKED FT_LOSS_CHUNKED
#define EST_LOSS_CCE FT_LOSS_CCE
#define EST_LOSS_CHUNKED_OUTPUT FT_LOSS_CHUNKED_OUTPUT
typedef ft_optimizer est_optimizer;
#define EST_OPT_ADAMW FT_OPT_ADAMW
#define EST_OPT_SGD FT_OPT_SGD
#define EST_OPT_ADAMW_8BIT FT_OPT_ADAMW_8BIT
#define EST_OPT_PAGED_ADAMW_8BIT FT_OPT_PAGED_ADAMW_8BIT
#define EST_OPT_ADAFACTOR FT_OPT_ADAFACTOR
#define EST_OPT_LION FT_OPT_LION
#define EST_OPT_SGD_MOMENTUM FT_OPT_SGD_MOMENTUM
#define EST_OPT_PAGED_ADAMW_32BIT FT_OPT_PAGED_ADAMW_32BIT
#define EST_OPT_ADAFACTOR_BETA1 FT_OPT_ADAFACTOR_BETA1
#define EST_OPT_ADAMW_4BIT FT_OPT_ADAMW_4BIT
typedef enum { EST_FW_FTRAIN, EST_FW_HF, EST_FW_DEEPSPEED, EST_FW_FSDP } est_framework;
/* Storage of the frozen base under LoRA (estimator/model/quant.c): none = the compute dtype. */
typedef enum { EST_QUANT_NONE, EST_QUANT_NF4, EST_QUANT_INT8 } est_quant;
/* FP8 linears (torchao Float8Linear, estimator/model/fp8.h): none, or one of
 * torchao's Float8LinearConfig recipes (torchao 0.19 float8/config.py
 * Float8LinearRecipeName). */
typedef enum { EST_FP8_NONE, EST_FP8_TENSORWISE, EST_FP8_ROWWISE, EST_FP8_ROWWISE_GW_HP } est_fp8;
/* The training objective (estimator/frameworks/rl.c): plain next-token SFT, or
 * one of TRL's preference trainers. */
typedef enum { EST_RL_NONE, EST_RL_DPO, EST_RL_ORPO, EST_RL_KTO } est_rl;
/* PEFT modules_to_save (estimator/frameworks/rl.c, est_save_*): whole modules
 * trained as copies beside their frozen originals. */
#define EST_SAVE_EMBED 1u /* embed_tokens */
#define EST_SAVE_HEAD 2u  /* lm_head */
/* bnb_4bit_compute_dtype: the dtype quantized weights are dequantized to. */
typedef enum { EST_CDT_AUTO, EST_CDT_BF16, EST_CDT_FP16, EST_CDT_FP32 } est_compute_dtype;

/* LoRA's variants in PEFT's own terms (estimator/model/peft.c): rsLoRA
 * (use_rslora: scaling alpha/sqrt(r), no byte changes), DoRA (use_dora: a
 * trained magnitude vector and the weight norm in every forward), LoRA-FA
 * (peft.optimizers.create_lorafa_optimizer: A frozen, B's gradient projected). */
typedef enum { EST_LORA_PLAIN, EST_LORA_RSLORA, EST_LORA_DORA, EST_LORA_FA } est_lora_variant;

/* LoRA adapters (PEFT, estimator/model/lora.c); rank 0 = full fine-tuning. */
typedef struct est_lora {
    int64_t rank;       /* r: A is (r, d_in), B is (d_out, r) */
    double alpha;       /* lora_alpha; the scaling alpha/r changes no byte */
    uint32_t targets;   /* bit set of est_lora_target (lora.h) */
    double dropout;     /* lora_dropout p; 0 = nn.Identity (nothing saved) */
    est_lora_variant variant;
    bool base_dtype;    /* --lora-dtype bf16: the adapters stay in the base's dtype (PEFT
                           autocast_adapter_dtype=False; torchtune's and Answer.AI's bf16 LoRA) */
    bool fa_a_grad;     /* LoRA-FA with lora_A requiring grad again (--lora-fa-a-grad; lora.h
                           est_lora_a_grad): the optimizer still never steps it */
} est_lora;

/* The PEFT method (estimator/model/peft.h): LoRA (on when lora.rank > 0),
 * IA3 (tuners/ia3: a trained vector scales a Linear's output, or a
 * feed-forward Linear's input), prompt tuning (tuners/prompt_tuning: N trained
 * virtual token embeddings in front of every sequence). */
typedef enum {
    EST_PEFT_LORA, EST_PEFT_IA3, EST_PEFT_PROMPT_TUNING,
    /* peft_prompt.h: per-layer keys and values of N virtual tokens
     * (tuners/prefix_tuning); N embeddings from an MLP encoder put before
     * every sequence (tuners/p_tuning) */
    EST_PEFT_PREFIX_TUNING, EST_PEFT_P_TUNING,
    /* peft_prompt.h: LLaMA-Adapter's gated attention of every query over
     * adapter_len trained tokens per layer (tuners/adaption_prompt) */
    EST_PEFT_ADAPTION_PROMPT,
    /* peftvec (estimator/model/peft_vec.h): AdaLoRA, VeRA, LN tuning, MiSS, trainable tokens,
     * PVeRA, TinyLoRA */
    EST_PEFT_ADALORA, EST_PEFT_VERA, EST_PEFT_LN_TUNING, EST_PEFT_MISS, EST_PEFT_TRAINABLE_TOKENS,
    EST_PEFT_PVERA, EST_PEFT_TINYLORA,
    /* peftdelta (estimator/model/peft_delta.h): a weight or delta weight per call */
    EST_PEFT_LOHA, EST_PEFT_LOKR, EST_PEFT_OFT, EST_PEFT_FOURIERFT, EST_PEFT_WAVEFT
} est_peft;

/* MiSS's init_weights (tuners/miss/config.py): true (a block (r, d_out)
 * summed over d_in / r slices of x), "bat" (blocks (d_out/r, r, r) built into
 * a full weight every call), "mini" (a (r, mini_r) block repeated). */
typedef enum { EST_MISS_DEFAULT, EST_MISS_BAT, EST_MISS_MINI } est_miss_init;

/* The settings of PEFT's methods in peft_vec.h (their own r and
 * target_modules, apart from LoRA's so that est_lora_on stays LoRA's). */
typedef struct est_peft_vec {
    int64_t rank;        /* r (AdaLoRA: init_r, the rank it starts at) */
    uint32_t targets;    /* target_modules (est_lora_target bits) */
    est_miss_init miss;  /* MiSS's init_weights */
    int64_t mini_r;      /* MiSS "mini": the block's width */
    int64_t tokens;      /* trainable tokens: how many token_indices */
    int64_t u;           /* TinyLoRA: the trained vector's length (0: PEFT's default, 64) */
    double tying;        /* TinyLoRA: weight_tying, 0 (a vector per target) to 1 (one) */
} est_peft_vec;

/* The settings of the methods that build a dense (delta) weight per adapted
 * Linear each forward (estimator/model/peft_delta.h); 0 = unset. */
typedef struct est_pdelta {
    int64_t rank;        /* LoHa / LoKr / OFT r */
    double alpha;        /* LoHa / LoKr alpha (the scaling alpha/r changes no byte) */
    int64_t factor;      /* LoKr decompose_factor: -1 (PEFT's default) or a divisor */
    int64_t n_frequency; /* FourierFT / WaveFT n_frequency */
    uint32_t targets;    /* target_modules (est_lora_target bits; default q, v) */
} est_pdelta;

/* The loop around the model: the HF Trainer (outputs dropped when
 * compute_loss returns, zero_grad after the step), or a plain PyTorch loop as
 * PEFT's method comparison writes it (optimizer.zero_grad() first; `outputs =
 * model(**batch)` stays bound until the next forward returns). */
typedef enum { EST_LOOP_TRAINER, EST_LOOP_PLAIN } est_train_loop;

/* torch.optim.AdamW's implementation (--adamw-impl; optimizers.h): the
 * default follows the loop and the stack (the HF Trainer's default optim,
 * stack.h trainer_default_fused; a plain loop's torch.optim.AdamW() picks
 * foreach), or the run names one: foreach=True ("adamw_torch" on a stack
 * whose default is fused) or fused=True ("adamw_torch_fused"). */
typedef enum { EST_ADAMW_DEFAULT, EST_ADAMW_FOREACH, EST_ADAMW_FUSED } est_adamw_impl;

/* How batches of samples of different lengths are formed and padded (with
 * --seq-lengths): random batches padded to their longest sample (a padding
 * collator), or batches of samples sorted by length (group_by_length, PEFT's
 * BucketIterator). */
typedef enum { EST_BATCHING_RANDOM, EST_BATCHING_SORTED } est_batching;

/* FSDP settings (--framework fsdp; estimator/frameworks/fsdp_policy.h names and parses
 * them). Value 0 of each is the default a run gets from est_run_defaults'
 * zeroing (run.h). */
typedef enum { EST_FSDP1, EST_FSDP2 } est_fsdp_version; /* FlatParameter / fully_shard */
typedef enum { EST_LOAD_FP32, EST_LOAD_BF16 } est_load_dtype; /* from_pretrained's torch_dtype */
/* Who reads the checkpoint into host RAM under FSDP: accelerate's
 * cpu_ram_efficient_loading (FSDP_CPU_RAM_EFFICIENT_LOADING) true makes rank 0
 * alone load it and the others start on the meta device (sync_module_states
 * broadcasts from rank 0). AUTO: unsaid, as the seam assumes (rank 0 under
 * LoRA, as the FSDP + QLoRA recipes set it; every rank for a full fine-tune,
 * accelerate's default). */
typedef enum { EST_FSDP_LOAD_AUTO, EST_FSDP_LOAD_EVERY_RANK, EST_FSDP_LOAD_RANK0 } est_fsdp_loading;
typedef enum { EST_REDUCE_PARAM, EST_REDUCE_FP32 } est_reduce_dtype; /* MixedPrecision.reduce_dtype */
/* FSDP1 backward_prefetch: None (the HF Trainer's and accelerate's default,
 * "NO_PREFETCH"), BACKWARD_PRE (torch's own default), BACKWARD_POST. */
typedef enum { EST_FSDP_PREFETCH_NONE, EST_FSDP_PREFETCH_PRE, EST_FSDP_PREFETCH_POST } est_fsdp_prefetch;
/* The module class FSDP wraps as its units (transformer_layer_cls_to_wrap):
 * the decoder layer, or a mixture of experts' sparse MoE block (the layer's
 * attention and norms then stay in the root unit). */
typedef enum { EST_FSDP_WRAP_DECODER_LAYER, EST_FSDP_WRAP_MOE_BLOCK } est_fsdp_wrap;
/* Where LoRA's adapters go under FSDP: PEFT's fsdp_auto_wrap_policy (the HF
 * Trainer's and accelerate's path: every adapter weight a unit of its own), or
 * the decoder layer's unit with its frozen base (transformer_auto_wrap_policy
 * alone, FSDP1 with use_orig_params=True; fully_shard per decoder layer as
 * torchtune and torchtitan apply it). */
typedef enum { EST_FSDP_LORA_WRAP_PEFT, EST_FSDP_LORA_WRAP_LAYER } est_fsdp_lora_wrap;
/* Who wraps the model in FSDP: accelerate's prepare_model (the HF Trainer,
 * `accelerate launch`; the default), or the script itself, calling
 * FullyShardedDataParallel / fully_shard on a model it built (a plain PyTorch
 * loop: torchtune, torchtitan, ftest's probe). Only accelerate upcasts FSDP1's
 * low-precision FlatParameters to fp32 (stack.h). */
typedef enum { EST_FSDP_BY_ACCELERATE, EST_FSDP_BY_SCRIPT } est_fsdp_wrapper;

/* DeepSpeed settings read from a --deepspeed-config file; EST_DS_UNSET = the
 * default in estimator/catalog/constants.h (0 is a real setting: a persistence
 * threshold of 0 keeps no parameter whole, a prefetch bucket of 0 prefetches
 * nothing). */
#define EST_DS_UNSET (-1)
typedef struct est_ds_settings {
    int64_t reduce_bucket_elems;   /* elements, > 0 */
    int64_t prefetch_bucket_elems; /* elements, >= 0 */
    int64_t persistence_elems;     /* elements, >= 0 */
    int64_t sub_group_elems;       /* elements, > 0 (0 from the file until est_ds_config_resolve) */
    /* Read for the records (cpu-trace pins them, docs/records.md); the memory
     * model does not use them yet (issue 22's gap list, docs/validation.md). */
    int64_t allgather_bucket_elems; /* stages 1-2: allgather_bucket_size, elements, >= 0 */
    int64_t max_live_elems;         /* stage3_max_live_parameters, elements, >= 0 */
    int64_t max_reuse_distance_elems; /* stage3_max_reuse_distance, elements, >= 0 */
    bool overlap_comm;          /* stages 1-2: a second bucket */
    int comm_bytes;             /* communication_data_type: bytes per element gradients are reduced
                                   in (4 fp32, 2 fp16/bf16); 0 when unset, the gradient dtype
                                   (engine.py communication_data_type, 0.14.2-0.19.8) */
    int grad_accum_dtype;       /* data_types.grad_accum_dtype: 0 unset, else the EST_PREC_*
                                   of its dtype plus 1 (fp32, bf16-mixed, fp16-mixed) */
    bool loose_grads;           /* contiguous_gradients: false (stage 3: no contiguous reduce
                                   bucket, each gradient its own tensor until the flush) */
    bool client_optimizer;      /* the config names no "optimizer": the script's runs (the HF Trainer's
                                   torch AdamW, foreach on CUDA or fused: est_optimizer_adamw_fused)
                                   instead of DeepSpeed's fused Adam */
    int64_t train_batch;        /* train_batch_size as a number; EST_DS_UNSET when absent or "auto" */
    bool accum_given;           /* gradient_accumulation_steps was a number */
    bool keep_client_optimizer; /* zero_force_ds_cpu_optimizer: false (default true) */
    bool client_one_group;      /* the script's optimizer has one parameter group (the CPU traces'
                                   cpu_truth_setups.py adamw), not the HF Trainer's two */
    int replaced_optimizer;     /* the script's optimizer accelerate replaced by DeepSpeedCPUAdam
                                   under ZeRO-Offload (est_optimizer), or -1 */
    bool fake_group;            /* one rank of a larger job emulated on torch.distributed's fake
                                   backend (a record's method "rank-emulated"): collectives return
                                   at once, so no free waits on another rank, and ZeRO-3's
                                   stream-ordered frees complete at once (seam_deepspeed_lag.c);
                                   also set for a CPU trace, which has no streams */
    bool offload_param_only;    /* stage 3 offload_param without offload_optimizer: the
                                   compute-dtype partitions pinned on the host, the optimizer
                                   (fp32 master, state, gradient partition) on the GPU */
} est_ds_settings;

/* Partial training (--trainable, axolotl's unfrozen_parameters): only the
 * parameters whose Hugging Face names (model.named_parameters(), PEFT's
 * names under an adapter) match one of the patterns train; every other one
 * is frozen, adapters included (estimator/model/trainable.h). */
#define EST_TRAINABLE_MAX 16
#define EST_TRAINABLE_LEN 96
typedef struct est_trainable {
    int n;              /* patterns; 0: the run's usual trainable set */
    char pattern[EST_TRAINABLE_MAX][EST_TRAINABLE_LEN]; /* POSIX extended regexes, found anywhere
                                                           in a name (anchor with ^ and $) */
    bool input_grads;   /* the embedding's output requires grad whatever trains (transformers'
                           enable_input_require_grads, which axolotl calls) */
    bool lenient;       /* a pattern that matches nothing is no error (axolotl's freeze.py
                           skips it); the command line's patterns must each match */
} est_trainable;

typedef struct est_run {
    ft_model model;
    int64_t layers_used;     /* blocks actually trained (ftrain --layers); == model.num_layers by default */
    est_gpu gpu;             /* the GPU every rank runs on */
    int64_t gpus_per_node;   /* ranks per node */
    int64_t nodes;
    bool fake_process_group; /* collectives on torch's fake backend (a rank emulated on one
                                GPU, a record's hardware.process_group "fake"): no NCCL */
    int64_t rank;            /* the rank whose step is simulated where ranks differ (ZeRO-1/2's
                                partition); -1: the one the framework's seam picks as largest */
    int64_t micro_batch;     /* sequences per GPU per forward/backward */
    int64_t grad_accum;      /* micro-batches per optimizer step */
    int64_t seq_len;         /* tokens per sequence (every sample padded to it; with seq_mean,
                                the longest batch's padded length) */
    est_precision precision;
    int zero_stage;          /* 0 (DDP) .. 3 */
    est_offload offload;
    est_checkpointing checkpointing;
    est_attention attention;
    est_loss loss;
    est_optimizer optimizer;
    est_adamw_impl adamw_impl; /* adamw only: foreach or fused (default: by loop and stack) */
    est_framework framework;
    bool expandable_segments; /* PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True */
    bool padding_mask;        /* batches carry padding, so attention gets an explicit mask */
    est_ds_settings ds;       /* from a DeepSpeed config file */
    const est_stack *stack;   /* framework versions (stack.h); never NULL after est_run_defaults */
    bool zero_init;           /* ZeRO-3: the model was built under deepspeed.zero.Init (HF's
                                 order when TrainingArguments(deepspeed=...) exists before
                                 from_pretrained); false: DeepSpeed partitions a finished
                                 module at initialize (--no-zero-init) */
    double inter_node_gb_per_s; /* network between nodes per node, one direction, 1e9 B/s;
                                   0 = the default_inter_node_gb_per_s constant (timing.c) */
    /* Host RAM of each node, for the verdict (estimate.c): a fixed amount
     * (--host-ram, an instance's catalog entry), or else a multiple of the
     * node's GPU memory (the CLI's default); both 0 = host RAM is not checked
     * (records, which measure the GPU). */
    int64_t host_ram_bytes;         /* per node; 0 = use host_ram_per_gpu_memory */
    double host_mem_gb_per_s;       /* the node's DRAM bandwidth (theoretical peak), 1e9 B/s, for
                                       the CPU optimizer under offload; 0 = the per-GPU default
                                       (host_mem_gb_per_s_per_gpu x GPUs per node) */
    int64_t host_cores;             /* the node's physical cores; 0 = host_cores_per_gpu x GPUs */
    double host_ram_per_gpu_memory; /* host RAM / (GPUs per node x GPU memory); 0 = none */
    /* The room a fit must leave (--tight-margin, a fraction of the GPU's and
     * the host's memory) to be a plain yes rather than "tight": searches and
     * recommendations (estimator/search/) keep it. est_run_defaults sets
     * EST_TIGHT_MARGIN_DEFAULT. */
    double tight_margin_frac;
    est_fsdp_version fsdp_version; /* --fsdp-version: 1 (default, accelerate's default through
                                      1.13) or 2 (fully_shard, torch >= 2.4) */
    est_load_dtype load_dtype;     /* --load-dtype: the dtype the weights were loaded in
                                      (from_pretrained's torch_dtype; fp32 is its default) */
    est_fsdp_loading fsdp_loading; /* cpu_ram_efficient_loading from an axolotl or accelerate
                                      config; AUTO otherwise */
    est_reduce_dtype fsdp_reduce;  /* --fsdp-reduce-dtype: gradient reduction dtype (accelerate
                                      sets reduce_dtype = param_dtype) */
    est_fsdp_prefetch fsdp_backward_prefetch; /* --fsdp-backward-prefetch: FSDP1's backward_prefetch
                                                 (FSDP2 always prefetches one unit back) */
    bool fsdp_forward_prefetch;    /* --fsdp-forward-prefetch: FSDP1's forward_prefetch */
    est_fsdp_wrap fsdp_wrap;       /* transformer_layer_cls_to_wrap from an axolotl config */
    est_fsdp_lora_wrap fsdp_lora_wrap; /* --fsdp-lora-wrap: the adapters' units */
    est_fsdp_wrapper fsdp_wrapper; /* --fsdp-wrapper: accelerate or the script wraps the model */
    bool fsdp_shard_ends;          /* FSDP2: the embedding and the LM head are units of their own
                                      (torchtune's custom_sharded_layers), not the root's */
    est_fp8 fp8;                   /* --fp8: the block Linears run as torchao Float8Linear */
    bool fp8_all_gather;           /* --fsdp-float8-all-gather: FSDP2 gathers their weights in fp8
                                      (Float8LinearConfig.enable_fsdp_float8_all_gather) */
    est_lora lora;            /* adapters; lora.rank == 0 trains every weight */
    est_quant quant;          /* frozen base storage (LoRA only) */
    bool double_quant;        /* nf4: absmax constants quantized again (bnb compress_statistics) */
    est_compute_dtype quant_compute; /* dtype of dequantized temporaries */
    bool optimizer_in_backward; /* each parameter stepped in its grad hook, its gradient freed */
    bool activation_offload;    /* saved activations moved to pinned host memory (save_on_cpu) */
    /* PEFT beyond plain LoRA (estimator/model/peft.h). */
    est_peft peft;              /* the method; LoRA needs lora.rank > 0 */
    uint32_t ia3_targets;       /* IA3: the Linears scaled (est_lora_target bits) */
    uint32_t ia3_feedforward;   /* IA3: those whose input is scaled (a subset of ia3_targets) */
    int64_t virtual_tokens;     /* prompt tuning: num_virtual_tokens, prepended to every sequence */
    int64_t encoder_hidden;     /* P-tuning: the MLP encoder's encoder_hidden_size (peft_prompt.h) */
    int64_t adapter_len;        /* adaption prompt: adapter_len tokens in every layer (adapter_layers:
                                   all of them, peft_prompt.h) */
    est_peft_vec vec;           /* AdaLoRA, VeRA, MiSS (peft_vec.h) */
    est_pdelta pdelta;          /* LoHa, LoKr, OFT, FourierFT, WaveFT (peft_delta.h) */
    /* The loop and the data (docs/usage.md, "Sequences of many lengths"). */
    est_train_loop train_loop;
    bool kv_cache_off;          /* the model's config.use_cache is False: no KV cache in training
                                   (transformers builds one whenever use_cache is on and the
                                   blocks are not checkpointed) */
    int64_t empty_cache_steps;  /* the loop calls torch.cuda.empty_cache() every N steps; 0 never */
    bool empty_cache_at_start;  /* the script calls torch.cuda.empty_cache() once the model is set
                                   up, before the first step (ftest_probe.py's reset_peaks): the
                                   set-up's cached blocks are gone when training starts */
    int64_t allocated_at_start_bytes; /* what the process's caching allocator already held when
                                   the run began (a measured run that followed another in one
                                   process: ftest_probe.py's note "N bytes allocated at its
                                   start"); the HF seam books the cuBLAS workspaces it covers
                                   before the model (seam_hf.c); 0: a fresh process */
    double seq_mean;            /* mean padded tokens per sequence when batches differ in length
                                   (dynamic padding); 0: every batch is seq_len long. seq_len is
                                   then the longest batch's, which sets the memory peak */
    double seq_tokens_mean;     /* with seq_mean over ranks that wait for each other at their
                                   collectives: one rank's mean padded tokens per sequence (what
                                   it counts as processed), where seq_mean is the longest rank's
                                   (what the step waits for); 0: seq_mean */
    char settings_from[800];    /* "FILE: key, key" when a training YAML set values; "" otherwise */
    char settings_ignored[640]; /* keys of that YAML that change nothing ftest estimates, "a, b" */
    char settings_unknown[320]; /* keys of that YAML outside ftest's tables (axolotl_keys.c) */
    char weights_note[200];     /* what the safetensors headers of --model hold; "" when none were read */
    /* Appended for issue 19's mechanisms (docs/method.md, each by name). */
    bool ckpt_non_reentrant;    /* checkpointing through torch.utils.checkpoint(use_reentrant=False) */
    bool packed;                /* sample packing: several samples per row, block-causal (varlen)
                                   attention by position_ids, rows padded to seq_len */
    int64_t packed_sample_len;  /* packed samples' sum(len^2) / sum(len), tokens; 0 = unknown
                                   (attention's FLOPs taken at one sample per row, the bound) */
    bool packed_flex;           /* the packed rows' block-causal mask is a flex_attention BlockMask
                                   (torchtune's PackedDataset), not flash-attn's varlen path */
    uint32_t modules_to_save;   /* EST_SAVE_* bits (LoRA only) */
    est_rl rl;                  /* the objective */
    bool rl_precomputed_ref;    /* TRL precompute_ref_log_probs: no reference forward in the step */
    uint32_t liger;             /* Liger-Kernel's kernels in use: EST_LIGER_* bits (model/liger.h);
                                   the fused linear cross-entropy is loss = EST_LOSS_CHUNKED */
    /* Checkpointing policies and the compiler (docs/method.md, "Op-level selective
     * checkpointing", "torch.compile"). */
    int64_t ckpt_every;         /* --ckpt-every N: of the blocks, only those with (i + 1) % N == 0
                                   are checkpointed (torchtitan's selective_ac_option "N"); 0 or 1:
                                   every block */
    bool compiled;              /* --compile: the blocks run through torch.compile (inductor) */
    int8_t offload_stash;       /* --activation-offload keeps the device copies of the last N
                                   offloaded tensors (TRL's OffloadActivations with streams:
                                   max_fwd_stash_size 5); 0: save_on_cpu */
    uint32_t kernels;           /* EST_KERNEL_* bits (estimator/model/kernels.h): fused autograd
                                   Functions in place of the modeling code's ops */
    est_trainable trainable;    /* only the parameters matching these patterns train */
    /* Tensor parallelism (docs/method.md, "Tensor parallelism"; model/tp.h). */
    int64_t tp;                 /* --tp N: torchtitan's tensor-parallel degree over the node's GPUs
                                   (0 or 1: none); the data-parallel degree is world / tp */
    int64_t cp;                 /* --cp N: context parallelism, refused beyond 1 */
    bool tp_local;              /* this run is one TP rank's view (est_tp_view): the model's
                                   heads, KV heads, MLP width and vocabulary divided by tp */
} est_run;

/* Bounds est_run_validate enforces (they keep every byte count far from int64
 * overflow); the command line, the DeepSpeed config reader and the searches
 * (plan, inverse queries) use the same. */
#define EST_MAX_GPUS_PER_NODE 1024
#define EST_MAX_NODES 65536
#define EST_MAX_BATCH 65536
#define EST_MAX_ACCUM (1 << 20)
#define EST_MAX_SEQ ((int64_t)1 << 24)

/* Total ranks (gpus_per_node * nodes). */
int64_t est_run_world(const est_run *run);
/* The data-parallel ranks: the world divided by the tensor-parallel degree
 * (a TP group shares one batch and one shard of FSDP's mesh); the world
 * without --tp. */
int64_t est_run_dp(const est_run *run);

/* torch.utils.checkpoint wraps the decoder blocks (--checkpointing full or
 * selective-op; ftrain's own selective recompute is not a checkpoint). */
bool est_run_ckpt_wraps(const est_run *run);
/* Block `layer` (0-based) is checkpointed: wrapped, and among every
 * ckpt_every-th (torchtitan 0.2.0 activation_checkpoint.py _apply_layer_sac:
 * a counter from 1 per block, checkpointed when counter % N == 0). */
bool est_run_block_checkpointed(const est_run *run, int64_t layer);

/* Names used on the command line, in records and in JSON output (the run
 * vocabulary's from common/run_vocab.h). */
#define est_precision_name ft_precision_name
#define est_offload_name ft_offload_name
#define est_checkpointing_name ft_checkpointing_name
#define est_attention_name ft_attention_name
#define est_loss_name ft_loss_name
#define est_optimizer_name ft_optimizer_name
const char *est_framework_name(est_framework f);
const char *est_quant_name(est_quant q);
const char *est_compute_dtype_name(est_compute_dtype c);
const char *est_train_loop_name(est_train_loop l);
const char *est_batching_name(est_batching b);

/* Inverse of the above: 0 and *out set, or -1 with a message listing the choices. */
#define est_precision_parse ft_precision_parse
#define est_offload_parse ft_offload_parse
#define est_checkpointing_parse ft_checkpointing_parse
#define est_attention_parse ft_attention_parse
#define est_loss_parse ft_loss_parse
#define est_optimizer_parse ft_optimizer_parse
int est_framework_parse(const char *s, est_framework *out, char *err, size_t errlen);
int est_quant_parse(const char *s, est_quant *out, char *err, size_t errlen);
int est_compute_dtype_parse(const char *s, est_compute_dtype *out, char *err, size_t errlen);
int est_train_loop_parse(const char *s, est_train_loop *out, char *err, size_t errlen);
int est_batching_parse(const char *s, est_batching *out, char *err, size_t errlen);

/* Tokens in one rank's micro-batch. */
int64_t est_tokens(const est_run *run);

/* Bytes per element of the weights/activations the step computes in. */
int64_t est_compute_dtype_bytes(est_precision p);
/* True when an fp32 master copy of the weights is kept (the *-mixed modes). */
bool est_has_master(est_precision p);

#endif
