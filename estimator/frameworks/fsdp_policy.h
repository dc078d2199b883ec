/* Names of the FSDP settings of a run (estimator/run_desc.h: est_fsdp_version,
 * est_load_dtype, est_reduce_dtype, est_fsdp_prefetch) for the command line,
 * records, accelerate's config and output.
 * What each setting does to memory is in estimator/frameworks/seam_fsdp*.c. */
#ifndef EST_FSDP_POLICY_H
#define EST_FSDP_POLICY_H

#include <stddef.h>

#include "run.h"

const char *est_fsdp_version_name(est_fsdp_version v);
const char *est_load_dtype_name(est_load_dtype d);
const char *est_reduce_dtype_name(est_reduce_dtype d);
const char *est_fsdp_prefetch_name(est_fsdp_prefetch p);

/* 0 and *out set, or -1 with a message listing the choices. */
int est_fsdp_version_parse(const char *s, est_fsdp_version *out, char *err, size_t errlen);
int est_load_dtype_parse(const char *s, est_load_dtype *out, char *err, size_t errlen);
int est_reduce_dtype_parse(const char *s, est_reduce_dtype *out, char *err, size_t errlen);
/* none | pre | post; also as FSDP and accelerate spell them, in any case:
 * NO_PREFETCH, BACKWARD_PRE, BACKWARD_POST. */
int est_fsdp_prefetch_parse(const char *s, est_fsdp_prefetch *out, char *err, size_t errlen);
/* fp32 | bf16 (--lora-dtype): *base_dtype = bf16. */
int est_lora_dtype_parse(const char *s, bool *base_dtype, char *err, size_t errlen);
/* peft | layer (est_fsdp_lora_wrap). */
int est_fsdp_lora_wrap_parse(const char *s, est_fsdp_lora_wrap *out, char *err, size_t errlen);
/* accelerate | torch (est_fsdp_wrapper: accelerate's prepare_model, or the
 * script's own FullyShardedDataParallel / fully_shard call). */
const char *est_fsdp_wrapper_name(est_fsdp_wrapper w);
int est_fsdp_wrapper_parse(const char *s, est_fsdp_wrapper *out, char *err, size_t errlen);

/* Bytes per element of the trainable shards under --framework fsdp, which
 * their gradients and AdamW state follow (w in docs/method.md "fsdp"); 0 when
 * the combination cannot run (bf16-loaded weights under --precision fp32). */
int est_fsdp_shard_bytes(const est_run *run);

/* transformer_layer_cls_to_wrap as accelerate and PEFT read it
 * (FSDP_TRANSFORMER_CLS_TO_WRAP, split on ','; each name looked up among the
 * model's module classes): the model's decoder layer or its sparse MoE block
 * (transformers 4.40-4.49 class names). A name of no module of the model
 * makes the run fail before training (PEFT utils/other.py
 * fsdp_auto_wrap_policy, 0.10-0.21: "Could not find the transformer layer
 * class to wrap in the model"; accelerate's own policy likewise): -1 with
 * that line; -1 too for other classes, which ftest does not model. */
int est_fsdp_wrap_parse(const ft_model *m, const char *classes, est_fsdp_wrap *out, char *err, size_t errlen);

#endif
