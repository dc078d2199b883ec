/* The run configuration of ftrain: what to train and how.
 *
 * Filled from the command line (cli.c) or directly by tests. The model shapes
 * come from the shared config reader (common/model_config.h); everything
 * else is the trainer's own. tr_config_validate is the single gate that every
 * configuration passes before any size is computed. */
#ifndef TR_CONFIG_H
#define TR_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model_config.h"
#include "run_vocab.h"

/* The run vocabulary is common/run_vocab.h's, shared with the estimator.
 * ftrain implements these values of it; tr_*_parse and tr_config_validate
 * refuse the others with one line. */
#define TR_HAS_PRECISION (FT_VOCAB_BIT(FT_PREC_FP32) | FT_VOCAB_BIT(FT_PREC_BF16_MIXED))
#define TR_HAS_OFFLOAD \
    (FT_VOCAB_BIT(FT_OFFLOAD_NONE) | FT_VOCAB_BIT(FT_OFFLOAD_OPTIMIZER) | FT_VOCAB_BIT(FT_OFFLOAD_OPTIMIZER_PARAMS))
#define TR_HAS_CHECKPOINTING \
    (FT_VOCAB_BIT(FT_CKPT_NONE) | FT_VOCAB_BIT(FT_CKPT_SELECTIVE) | FT_VOCAB_BIT(FT_CKPT_FULL))
#define TR_HAS_ATTENTION (FT_VOCAB_BIT(FT_ATTN_EAGER) | FT_VOCAB_BIT(FT_ATTN_FLASH))
#define TR_HAS_LOSS (FT_VOCAB_BIT(FT_LOSS_STANDARD) | FT_VOCAB_BIT(FT_LOSS_CHUNKED))
#define TR_HAS_OPTIMIZER (FT_VOCAB_BIT(FT_OPT_ADAMW) | FT_VOCAB_BIT(FT_OPT_SGD))

/* Largest values the trainer accepts; beyond them a flag is rejected as bad input. */
#define TR_MAX_RANKS 64        /* in-process ranks are threads */
#define TR_MAX_HEAD_DIM 512    /* flash attention keeps one head row on the stack */
#define TR_MAX_BATCH 65536
#define TR_MAX_ACCUM 65536
#define TR_MAX_STEPS 1000000000LL
#define TR_PATH_MAX 1024

/* Rows of the LM head computed at once by the chunked loss (docs/trainer.md). */
#define TR_CHUNKED_LOSS_ROWS 32

typedef struct tr_config {
    ft_model model;              /* shapes, from models/<name>.json or a config.json */
    char model_arg[TR_PATH_MAX]; /* --model as given (written to records) */
    int64_t layers;              /* blocks trained: the first `layers` of the model */
    int64_t seq_len;             /* T: tokens per sequence */
    int64_t micro_batch;         /* B: sequences per rank per forward/backward */
    int64_t grad_accum;          /* A: micro-batches per optimizer step */
    int64_t steps;               /* optimizer steps to run */
    int ranks;                   /* N: in-process ranks (threads) */
    int zero_stage;              /* 0 (replicated) .. 3 */
    ft_offload offload;
    ft_checkpointing checkpointing;
    ft_attention attention;
    ft_loss loss;
    ft_precision precision;
    ft_optimizer optimizer;
    double lr;                   /* peak learning rate */
    int64_t warmup;              /* linear warmup steps, then cosine to lr * TR_MIN_LR_FRAC */
    double weight_decay;         /* AdamW decoupled decay / SGD L2, on 2-D weights only */
    double clip;                 /* global-norm clip; 0 disables */
    uint64_t seed;               /* initializer and synthetic data */
    char data_path[TR_PATH_MAX]; /* "" = seeded synthetic task, else a token file */
    char init_path[TR_PATH_MAX]; /* "" = seeded initializer, else a .safetensors file */
    char record_path[TR_PATH_MAX]; /* "" = no record */
    char dump_grads_path[TR_PATH_MAX]; /* "" = none, else step 1's gradients go there (grad_dump.h) */
    double record_window_s;      /* a record per this many seconds of training (0 = every step) */
    int threads;                 /* pool threads for all ranks together; 0 = one per available CPU */
    char device[8];              /* backend: "cpu" or "cuda" (backend.h) */
    bool quiet;                  /* no per-step progress on stderr */
} tr_config;

#define TR_MIN_LR_FRAC 0.1

/* Defaults for everything but the model (which the caller sets). */
void tr_config_defaults(tr_config *cfg);

/* Checks ranges and contradictions; 0, or -1 with one line in err. Clamps
 * nothing: a bad value is an error, never silently changed. */
int tr_config_validate(const tr_config *cfg, char *err, size_t errlen);

/* Bytes of one element of weights/activations/grads in the compute dtype. */
int64_t tr_compute_bytes(ft_precision p);

/* The shared parsers (run_vocab.h) limited to what ftrain implements
 * (TR_HAS_*): a value of the vocabulary outside it is refused as not
 * implemented by ftrain. */
int tr_precision_parse(const char *s, ft_precision *out, char *err, size_t errlen);
int tr_offload_parse(const char *s, ft_offload *out, char *err, size_t errlen);
int tr_ckpt_parse(const char *s, ft_checkpointing *out, char *err, size_t errlen);
int tr_attention_parse(const char *s, ft_attention *out, char *err, size_t errlen);
int tr_loss_parse(const char *s, ft_loss *out, char *err, size_t errlen);
int tr_optimizer_parse(const char *s, ft_optimizer *out, char *err, size_t errlen);

#endif
