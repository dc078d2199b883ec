/* The run vocabulary shared by the estimator and the trainer: precision,
 * offload, checkpointing, attention, loss and optimizer. One definition of
 * each enum, the names that flags and records spell, and their parsers.
 *
 * Enums are append-only: their names are persisted in records, and a value's
 * number is its index in the name table (run_vocab.c). The estimator prices
 * every value (estimator/run_desc.h names them for its own code); the trainer
 * implements a subset and refuses the rest through the *_parse_among parsers
 * (trainer/config.h lists its subsets). */
#ifndef FT_RUN_VOCAB_H
#define FT_RUN_VOCAB_H

#include <stddef.h>
#include <stdint.h>

typedef enum { FT_PREC_FP32, FT_PREC_BF16_MIXED, FT_PREC_FP16_MIXED, FT_PREC_BF16 } ft_precision;
typedef enum { FT_OFFLOAD_NONE, FT_OFFLOAD_OPTIMIZER, FT_OFFLOAD_OPTIMIZER_PARAMS } ft_offload;
/* SELECTIVE: ftrain's recompute of the attention core; SELECTIVE_OP: torch.utils.checkpoint
 * with an op-level policy (torchtitan's, docs/method.md "Op-level selective checkpointing"). */
typedef enum { FT_CKPT_NONE, FT_CKPT_SELECTIVE, FT_CKPT_FULL, FT_CKPT_SELECTIVE_OP } ft_checkpointing;
typedef enum { FT_ATTN_EAGER, FT_ATTN_SDPA, FT_ATTN_FLASH } ft_attention;
/* CHUNKED_OUTPUT: torchtune's CEWithChunkedOutputLoss (8 logit chunks, each upcast for its
 * cross-entropy: estimator/model/block_ends.c). */
typedef enum { FT_LOSS_STANDARD, FT_LOSS_CHUNKED, FT_LOSS_CCE, FT_LOSS_CHUNKED_OUTPUT } ft_loss;
/* SGD is plain SGD (no momentum buffer); the rest are appended (estimator/model/optimizers.c). */
typedef enum {
    FT_OPT_ADAMW, FT_OPT_SGD, FT_OPT_ADAMW_8BIT, FT_OPT_PAGED_ADAMW_8BIT, FT_OPT_ADAFACTOR,
    FT_OPT_LION, FT_OPT_SGD_MOMENTUM, FT_OPT_PAGED_ADAMW_32BIT, FT_OPT_ADAFACTOR_BETA1,
    FT_OPT_ADAMW_4BIT
} ft_optimizer;

/* A set of values of one enum: bit v stands for value v. */
#define FT_VOCAB_BIT(v) ((unsigned)(v) < 32u ? 1u << (unsigned)(v) : 0u)

/* Names used on the command line, in records and in JSON output; "?" out of range. */
const char *ft_precision_name(ft_precision p);
const char *ft_offload_name(ft_offload o);
const char *ft_checkpointing_name(ft_checkpointing c);
const char *ft_attention_name(ft_attention a);
const char *ft_loss_name(ft_loss l);
const char *ft_optimizer_name(ft_optimizer o);

/* Inverse of the above: 0 and *out set, or -1 with "--FLAG must be one of
 * a|b|c (got "s")" in err. */
int ft_precision_parse(const char *s, ft_precision *out, char *err, size_t errlen);
int ft_offload_parse(const char *s, ft_offload *out, char *err, size_t errlen);
int ft_checkpointing_parse(const char *s, ft_checkpointing *out, char *err, size_t errlen);
int ft_attention_parse(const char *s, ft_attention *out, char *err, size_t errlen);
int ft_loss_parse(const char *s, ft_loss *out, char *err, size_t errlen);
int ft_optimizer_parse(const char *s, ft_optimizer *out, char *err, size_t errlen);

/* The same, accepting only the values in `allowed` (FT_VOCAB_BIT set) for a
 * program `who` that implements no more: a name of the vocabulary outside it
 * is refused with "--FLAG NAME is not implemented by WHO (it has a|b)", any
 * other string with "--FLAG must be one of a|b (got "s")". */
int ft_precision_parse_among(const char *s, uint32_t allowed, const char *who, ft_precision *out,
                             char *err, size_t errlen);
int ft_offload_parse_among(const char *s, uint32_t allowed, const char *who, ft_offload *out,
                           char *err, size_t errlen);
int ft_checkpointing_parse_among(const char *s, uint32_t allowed, const char *who,
                                 ft_checkpointing *out, char *err, size_t errlen);
int ft_attention_parse_among(const char *s, uint32_t allowed, const char *who, ft_attention *out,
                             char *err, size_t errlen);
int ft_loss_parse_among(const char *s, uint32_t allowed, const char *who, ft_loss *out, char *err,
                        size_t errlen);
int ft_optimizer_parse_among(const char *s, uint32_t allowed, const char *who, ft_optimizer *out,
                             char *err, size_t errlen);

#endif
