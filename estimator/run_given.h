/* Which of a run's settings the user gave explicitly, beside a config file
 * that may set them too (an axolotl YAML, an accelerate config): a setting
 * given wins over the file's. A plain struct, so the config readers under
 * estimator/frameworks/ take it without knowing the command line; the front
 * door (cli/cli_run.c) fills it from the parsed options. */
#ifndef EST_RUN_GIVEN_H
#define EST_RUN_GIVEN_H

#include <stdbool.h>

typedef struct est_given {
    bool model;                  /* the model (a name or a config.json) */
    bool gpus, nodes;            /* GPUs per node, nodes */
    bool batch, grad_accum, seq; /* micro-batch, accumulation steps, sequence length */
    bool precision, zero, offload, checkpointing, attention, loss, optimizer, framework;
    bool ds_config;              /* a DeepSpeed config file: it wins over one the file names */
    bool fsdp_version, load_dtype, fsdp_prefetch;
    bool fsdp_forward_prefetch;  /* forward prefetch switched on */
    bool fsdp_shard_ends;        /* --fsdp-shard-ends */
    bool non_reentrant;          /* non-reentrant activation checkpointing asked for */
    bool lora_rank, lora_alpha, lora_targets, lora_dropout, quant, modules_to_save;
    bool packed_sample_len, rl;
    bool fp8;                    /* --fp8 */
    bool kernels;                /* --kernels */
    bool trainable;              /* --trainable patterns: they win over unfrozen_parameters */
} est_given;

#endif
