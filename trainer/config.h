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

/* Enums are append-only: their names are persisted in records. */
typedef enum { TR_PREC_FP32 = 0, TR_PREC_BF16_MIXED = 1 } tr_precision;
typedef enum { TR_OFFLOAD_NONE = 0, TR_OFFLOAD_OPTIMIZER = 1, TR_OFFLOAD_OPTIMIZER_PARAMS = 2 } tr_offload;
typedef enum { TR_CKPT_NONE = 0, TR_CKPT_SELECTIVE = 1, TR_CKPT_FULL = 2 } tr_ckpt;
typedef enum { TR_ATTN_EAGER = 0, TR_ATTN_FLASH = 1 } tr_attention;
typedef enum { TR_LOSS_STANDARD = 0, TR_LOSS_CHUNKED = 1 } tr_loss;
typedef enum { TR_OPT_ADAMW = 0, TR_OPT_SGD = 1 } tr_optimizer;

/* Largest values the trainer accepts; beyond them a flag is rejected as bad input. */
#define TR_MAX_RANKS 64        /* in-process ranks are threads */
#define TR_MAX_HEAD_DIM 512    /* flash attention keeps one head row on the stack */
#define TR_MAX_BATCH 65536
#define TR_MAX_ACCUM 65536
#define TR_MAX_STEPS 1000000000LL
#define TR_PATH_MAX 1024

/* Rows of the LM head computed at once by the chunked loss (docs/trainer.md). */
#define TR_LOSS_CHUNK_ROWS 32

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
    tr_offload offload;
    tr_ckpt checkpointing;
    tr_attention attention;
    tr_loss loss;
    tr_precision precision;
    tr_optimizer optimizer;
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
int64_t tr_compute_bytes(tr_precision p);

const char *tr_precision_name(tr_precision p);
const char *tr_offload_name(tr_offload o);
const char *tr_ckpt_name(tr_ckpt c);
const char *tr_attention_name(tr_attention a);
const char *tr_loss_name(tr_loss l);
const char *tr_optimizer_name(tr_optimizer o);

int tr_precision_parse(const char *s, tr_precision *out, char *err, size_t errlen);
int tr_offload_parse(const char *s, tr_offload *out, char *err, size_t errlen);
int tr_ckpt_parse(const char *s, tr_ckpt *out, char *err, size_t errlen);
int tr_attention_parse(const char *s, tr_attention *out, char *err, size_t errlen);
int tr_loss_parse(const char *s, tr_loss *out, char *err, size_t errlen);
int tr_optimizer_parse(const char *s, tr_optimizer *out, char *err, size_t errlen);

#endif
