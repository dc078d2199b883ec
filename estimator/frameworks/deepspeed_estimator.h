/* What DeepSpeed's own memory estimators report, computed with DeepSpeed's
 * formulas and parameter-counting conventions (model states only: no
 * activations, no buffers, no transients). ftest prints these beside its own
 * estimate, labelled, because they are the figures users are usually given.
 *
 * Sources: deepspeed/runtime/zero/stage_1_and_2.py
 * estimate_zero2_model_states_mem_needs(_all_cold), and
 * deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs
 * (_all_cold); the _all_live variants count parameters from a live model with
 * model_to_params (shared tensors once; "largest layer" = the module with the
 * most parameters of its own, not counting children). */
#ifndef EST_DEEPSPEED_ESTIMATOR_H
#define EST_DEEPSPEED_ESTIMATOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model_config.h"
#include "run.h"

typedef struct est_ds_counts {
    int64_t total_params;         /* unique parameters */
    int64_t largest_layer_params; /* largest module's own parameters */
} est_ds_counts;

/* model_to_params() for a Llama-family model as Transformers builds it. */
void est_ds_count(const ft_model *m, est_ds_counts *out);

typedef struct est_ds_mem {
    int64_t cpu_bytes;
    int64_t gpu_bytes;
} est_ds_mem;

/* additional_buffer_factor is DeepSpeed's default 1.5 in both functions. */
#define EST_DS_BUFFER_FACTOR 1.5

est_ds_mem est_ds_zero2(int64_t total_params, int64_t gpus_per_node, int64_t nodes,
                        bool cpu_offload);
est_ds_mem est_ds_zero3(int64_t total_params, int64_t largest_layer_params, int64_t gpus_per_node,
                        int64_t nodes, bool cpu_offload, bool cpu_offload_params, bool zero_init);

/* The tables the _all_live functions print, in DeepSpeed's layout. */
void est_ds_print_tables(FILE *out, const ft_model *m, int64_t gpus_per_node, int64_t nodes);

/* DeepSpeed's model-states figure for the run's strategy (ZeRO-3's or
 * ZeRO-2's all-live estimator) where it describes the run: a DeepSpeed ZeRO
 * run at stage 1-3, full fine-tuning with AdamW in mixed precision; else 0
 * and a NULL function name. */
int64_t est_deepspeed_figure(const est_run *run, const char **function_name);

/* Why a DeepSpeed ZeRO run (stage 1-3) is not one DeepSpeed's estimators
 * describe ("LoRA trains the adapters only", ...); NULL when it is one, or
 * when the run is not DeepSpeed ZeRO (then there is nothing to compare). */
const char *est_deepspeed_not_comparable(const est_run *run);

#endif
