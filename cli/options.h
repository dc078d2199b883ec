/* The ftest command line, parsed into a plain struct without side effects (no
 * printing, no exiting, no file access), so it can be fuzzed and tested. */
#ifndef EST_OPTIONS_H
#define EST_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run.h"
#include "sweep.h" /* est_range */
#include "whole_number.h"

typedef enum {
    EST_CMD_ESTIMATE,   /* the default: memory per GPU, recommendation, alternatives */
    EST_CMD_MODELS,     /* list shipped models */
    EST_CMD_GPUS,       /* list the GPU catalog */
    EST_CMD_CHECK,      /* estimate records, compare with measurements */
    EST_CMD_CONSTANTS,  /* print the constants in force and their sources */
    EST_CMD_SWEEP,      /* tabulate along seq or batch */
    EST_CMD_TIMELINE,   /* memory at every moment of one step */
    EST_CMD_PLAN,       /* rank instance purchases */
    EST_CMD_FIT,        /* fit profile constants from records */
    EST_CMD_STACKS,     /* list the software stacks */
} est_command;

#define EST_PATH_MAX 1024
#define EST_MAX_FILES 64

typedef struct est_cli {
    est_command command;
    char model[EST_PATH_MAX];         /* name or config.json path; "" = not given */
    char gpu[32];                     /* catalog key; "" = default */
    char ds_config[EST_PATH_MAX];     /* --deepspeed-config FILE */
    char axolotl[EST_PATH_MAX];       /* --axolotl FILE (training YAML) */
    char accelerate[EST_PATH_MAX];    /* --accelerate-config FILE */
    char torchtune[EST_PATH_MAX];     /* --torchtune FILE (a torchtune recipe config) */
    char torchtune_recipe[64];        /* --torchtune-recipe NAME */

    /* Run description; *_set says whether the user gave it. */
    int64_t gpus, nodes, batch, grad_accum, seq, layers;
    bool gpus_set, nodes_set, batch_set, grad_accum_set, seq_set, layers_set;
    est_precision precision;          bool precision_set;
    int zero;                         bool zero_set;
    est_offload offload;              bool offload_set;
    est_checkpointing checkpointing;  bool checkpointing_set;
    est_attention attention;          bool attention_set;
    est_loss loss;                    bool loss_set;
    est_optimizer optimizer;          bool optimizer_set;
    est_adamw_impl adamw_impl;        /* --adamw-impl; EST_ADAMW_DEFAULT when not given */
    est_framework framework;          bool framework_set;
    bool expandable_segments;
    bool padding_mask;
    bool no_zero_init;                /* --no-zero-init */
    char stack[32];                   /* --stack NAME; "" = default */
    double host_ram_gib;              /* --host-ram GiB per node */
    bool host_ram_set;
    double tight_margin_pct;          /* --tight-margin PCT of the GPU (and host) memory */
    bool tight_margin_set;
    est_fsdp_version fsdp_version;    bool fsdp_version_set; /* --fsdp-version */
    est_load_dtype load_dtype;        bool load_dtype_set;   /* --load-dtype */
    est_reduce_dtype fsdp_reduce;     bool fsdp_reduce_set;  /* --fsdp-reduce-dtype */
    est_fsdp_prefetch fsdp_prefetch;  bool fsdp_prefetch_set; /* --fsdp-backward-prefetch */
    est_fsdp_lora_wrap fsdp_lora_wrap; bool fsdp_lora_wrap_set; /* --fsdp-lora-wrap */
    est_fsdp_wrapper fsdp_wrapper;    bool fsdp_wrapper_set; /* --fsdp-wrapper */
    bool lora_base_dtype; bool lora_dtype_set; /* --lora-dtype (bf16: true) */
    bool fsdp_forward_prefetch;       /* --fsdp-forward-prefetch */
    bool fsdp_shard_ends;             /* --fsdp-shard-ends */

    /* LoRA / QLoRA (estimator/model/lora.c, quant.c). */
    int64_t lora_rank;                bool lora_rank_set;
    double lora_alpha;                bool lora_alpha_set;
    uint32_t lora_targets;            bool lora_targets_set;
    double lora_dropout;              bool lora_dropout_set;
    est_quant quant;                  bool quant_set;
    est_compute_dtype compute_dtype;  bool compute_dtype_set;
    bool no_double_quant;
    bool optimizer_in_backward, activation_offload;
    bool router_aux_loss;
    /* Objectives and sequences (estimator/model/objective.h). */
    bool non_reentrant;               /* --non-reentrant */
    bool packing;                     /* --packing */
    int64_t packed_sample_len;        bool packed_sample_len_set;
    uint32_t modules_to_save;         bool modules_to_save_set;
    est_rl rl;                        bool rl_set;
    est_fp8 fp8;                      bool fp8_set;   /* --fp8 (estimator/model/fp8.h) */
    bool fp8_all_gather;              /* --fsdp-float8-all-gather */
    bool precomputed_ref;             /* --precomputed-ref */
    /* Liger-Kernel (estimator/model/liger.h). */
    uint32_t liger;                   bool liger_set;
    bool liger_all;                   /* --liger all: the model type's defaults */
    int64_t ckpt_every;               bool ckpt_every_set; /* --ckpt-every */
    int64_t tp;                       bool tp_set; /* --tp */
    int64_t cp;                       bool cp_set; /* --cp */
    bool compile;                     /* --compile */
    uint32_t kernels;                 bool kernels_set; /* --kernels (estimator/model/kernels.h) */

    /* PEFT methods, the loop, sequences of many lengths (cli_peft.c). */
    est_peft peft;                    bool peft_set;
    est_lora_variant lora_variant;    bool lora_variant_set;
    bool lora_fa_a_grad;              /* --lora-fa-a-grad */
    uint32_t ia3_targets;             bool ia3_targets_set;
    uint32_t ia3_feedforward;         bool ia3_feedforward_set;
    int64_t virtual_tokens;           bool virtual_tokens_set;
    int64_t encoder_hidden;           bool encoder_hidden_set;
    int64_t adapter_len;              bool adapter_len_set;
    int64_t peft_rank;                bool peft_rank_set;     /* AdaLoRA, VeRA, MiSS (peft_vec.h) */
    uint32_t peft_targets;            bool peft_targets_set;
    est_miss_init miss_init;          bool miss_init_set;
    int64_t miss_mini_r;              bool miss_mini_r_set;
    int64_t trainable_tokens;         bool trainable_tokens_set;
    int64_t tinylora_u;               bool tinylora_u_set;
    double tinylora_tying;            bool tinylora_tying_set;
    /* LoHa, LoKr, OFT, FourierFT (cli_peft_delta.c); --peft-rank and --peft-targets above too */
    double peft_alpha;                bool peft_alpha_set;
    int64_t lokr_factor;              bool lokr_factor_set;
    int64_t n_frequency;              bool n_frequency_set;
    est_train_loop train_loop;        bool train_loop_set;
    int64_t empty_cache_steps;        bool empty_cache_steps_set;
    bool no_kv_cache;
    char seq_lengths[EST_PATH_MAX];   /* --seq-lengths FILE */
    est_batching batching;            bool batching_set;
    double seq_mean;                  bool seq_mean_set;

    /* Output. */
    bool json, deepspeed_table, quiet, markdown, help, version;
    bool no_profile;                  /* built-in constants only, no calibrate/profiles */

    /* Inverse queries. */
    bool max_batch, max_seq, min_gpus;

    /* sweep */
    est_range sweep_seq, sweep_batch;
    bool sweep_seq_set, sweep_batch_set;
    char csv[EST_PATH_MAX], svg[EST_PATH_MAX], records_file[EST_PATH_MAX];

    /* plan */
    double tokens, epochs, max_hours, max_cost;
    int64_t global_batch;
    bool tokens_set, global_batch_set;
    double inter_node_gb_per_s;       /* --inter-node-gbps: network between nodes, GB/s per node; 0 = not given */
    char catalog[EST_PATH_MAX];

    /* check / fit: positional files */
    char files[EST_MAX_FILES][EST_PATH_MAX];
    int nfiles;
    char out[EST_PATH_MAX];           /* fit: folder for the profile set (required) */

    /* Partial training (estimator/model/trainable.h). */
    est_trainable trainable;          bool trainable_set; /* --trainable PATTERN[,PATTERN] */
} est_cli;


/* Parses argv[1..argc-1]. 0, or -1 with one line naming the bad argument. */
int est_cli_parse(int argc, char *const argv[], est_cli *cli, char *err, size_t errlen);

/* True when any of --zero, --offload, --checkpointing was given: the user asks
 * about one strategy rather than for a recommendation. */
bool est_cli_strategy_given(const est_cli *cli);

/* The usage text. */
extern const char est_usage[];

#endif
