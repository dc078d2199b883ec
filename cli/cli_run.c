#include "cli_run.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "accelerate_config.h"
#include "axolotl.h"
#include "torchtune.h"
#include "cli_peft.h"
#include "yaml_json.h"
#include "ds_config.h"
#include "fw_registry.h"
#include "instances.h"
#include "json_util.h"
#include "liger.h"
#include "model_source.h"
#include "params.h"

void est_cli_given(const est_cli *cli, est_given *given) {
    *given = (est_given){
        .model = cli->model[0] != '\0', .gpus = cli->gpus_set, .nodes = cli->nodes_set,
        .batch = cli->batch_set, .grad_accum = cli->grad_accum_set, .seq = cli->seq_set,
        .precision = cli->precision_set, .zero = cli->zero_set, .offload = cli->offload_set,
        .checkpointing = cli->checkpointing_set, .attention = cli->attention_set,
        .loss = cli->loss_set, .optimizer = cli->optimizer_set, .framework = cli->framework_set,
        .ds_config = cli->ds_config[0] != '\0', .fsdp_version = cli->fsdp_version_set,
        .load_dtype = cli->load_dtype_set, .fsdp_prefetch = cli->fsdp_prefetch_set,
        .fsdp_forward_prefetch = cli->fsdp_forward_prefetch, .fsdp_shard_ends = cli->fsdp_shard_ends,
        .non_reentrant = cli->non_reentrant,
        .lora_rank = cli->lora_rank_set, .lora_alpha = cli->lora_alpha_set,
        .lora_targets = cli->lora_targets_set, .lora_dropout = cli->lora_dropout_set,
        .quant = cli->quant_set, .modules_to_save = cli->modules_to_save_set,
        .packed_sample_len = cli->packed_sample_len_set, .rl = cli->rl_set, .kernels = cli->kernels_set,
        .fp8 = cli->fp8_set,
        .trainable = cli->trainable_set,
    };
}

/* LoRA flags. Without --framework (or a DeepSpeed config) LoRA runs on the HF
 * Trainer, the one profile that models it. */
static int est_cli_apply_lora(const est_cli *cli, est_run *run, char *err, size_t errlen) {
    if (cli->quant_set) run->quant = cli->quant;
    if (cli->compute_dtype_set) run->quant_compute = cli->compute_dtype;
    if (cli->no_double_quant) {
        if (run->quant != EST_QUANT_NF4)
            return ft_errorf(err, errlen, "--no-double-quant applies to --quant nf4");
        run->double_quant = false;
    }
    if (!cli->lora_rank_set) {
        if (cli->lora_alpha_set || cli->lora_targets_set || cli->lora_dropout_set || cli->lora_dtype_set)
            return ft_errorf(err, errlen, "--lora-alpha, --lora-targets, --lora-dropout and --lora-dtype need --lora-rank");
        return 0;
    }
    run->lora.rank = cli->lora_rank;
    if (cli->lora_alpha_set) run->lora.alpha = cli->lora_alpha;
    if (cli->lora_targets_set) run->lora.targets = cli->lora_targets;
    if (cli->lora_dropout_set) run->lora.dropout = cli->lora_dropout;
    if (cli->lora_dtype_set) run->lora.base_dtype = cli->lora_base_dtype;
    if (!cli->framework_set && !cli->ds_config[0] && !cli->axolotl[0] && !cli->accelerate[0] && !cli->torchtune[0])
        run->framework = est_fw_trainer();
    return 0;
}

/* Objectives and sequences (estimator/model/objective.h): flags win over
 * the training YAML's settings. */
static void est_cli_apply_objective(const est_cli *cli, est_run *run) {
    if (cli->non_reentrant) run->ckpt_non_reentrant = true;
    if (cli->packing) run->packed = true;
    if (cli->packed_sample_len_set) run->packed_sample_len = cli->packed_sample_len;
    if (cli->modules_to_save_set) run->modules_to_save = cli->modules_to_save;
    if (cli->rl_set) run->rl = cli->rl;
    if (cli->precomputed_ref) run->rl_precomputed_ref = true;
    if (cli->fp8_set) run->fp8 = cli->fp8;
    if (cli->fp8_all_gather) run->fp8_all_gather = true;
    if (cli->ckpt_every_set) run->ckpt_every = cli->ckpt_every;
    if (cli->tp_set) run->tp = cli->tp;
    if (cli->cp_set) run->cp = cli->cp;
    if (cli->compile) run->compiled = true;
    if (cli->trainable_set) run->trainable = cli->trainable;
    /* Partial training is modelled on the HF Trainer and ZeRO-3: without a
     * framework asked for, the HF Trainer (as for LoRA). */
    if (cli->trainable_set && !cli->framework_set && !cli->ds_config[0] && !cli->axolotl[0] && !cli->accelerate[0] && !cli->torchtune[0] &&
        !cli->zero_set)
        run->framework = est_fw_trainer();
}

/* --liger (liger.h): `all` is the model type's defaults; the fused linear
 * cross-entropy is the chunked loss. The flag replaces a YAML's liger_* set. */
static int est_cli_apply_liger(const est_cli *cli, est_run *run, char *err, size_t errlen) {
    if (!cli->liger_set) return 0;
    const uint32_t bits = cli->liger_all ? est_liger_defaults(&run->model) : cli->liger;
    run->liger = bits & ~EST_LIGER_FLCE;
    if (!(bits & EST_LIGER_FLCE)) return 0;
    if (cli->loss_set && cli->loss != EST_LOSS_CHUNKED)
        return ft_errorf(err, errlen, "--liger fused_linear_cross_entropy is --loss chunked, not --loss %s",
                         est_loss_name(cli->loss));
    run->loss = EST_LOSS_CHUNKED;
    return 0;
}

/* The checkpoint's own count beside config.json's: equal for an unquantized
 * checkpoint that stores a tied head once. */
static void note_weights(const ft_model *model, const est_st_summary *w, est_run *run) {
    est_params p;
    est_count_params(model, model->num_layers, &p);
    char diff[96] = "equal to config.json's count";
    if (w->elements != p.total)
        snprintf(diff, sizeof diff, "config.json counts %lld (quantized, tied or extra tensors?)",
                 (long long)p.total);
    snprintf(run->weights_note, sizeof run->weights_note,
             "%lld parameters in %lld tensors (%s) in %lld file%s, %s", (long long)w->elements,
             (long long)w->tensors, w->dtypes[0] ? w->dtypes : "none", (long long)w->files,
             w->files == 1 ? "" : "s", diff);
}

/* The catalog's GPU, or under a framework that runs on the CPU (ftrain's CPU
 * backend, fw_registry.h cpu_device) the device "cpu", as in its records
 * (record.c), whose memory is this machine's RAM (docs/trainer.md, "Records")
 * and whose time is the CPU device's (estimator/ledger/cpu_device.h). */
static const est_gpu *find_gpu(const est_gpu_catalog *cat, const char *gname, const est_cli *cli) {
    static est_gpu cpu_gpu;
    const est_gpu *gpu = est_gpu_find(cat, gname);
    if (gpu || strcmp(gname, "cpu") || !cli->framework_set || !est_fw_info_of(cli->framework)->cpu_device)
        return gpu;
    memset(&cpu_gpu, 0, sizeof cpu_gpu);
    ft_strlcpy(cpu_gpu.name, "cpu", sizeof cpu_gpu.name);
    ft_strlcpy(cpu_gpu.display, "CPU (ftrain reference backend)", sizeof cpu_gpu.display);
    cpu_gpu.memory_bytes = (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
    return &cpu_gpu;
}

/* --torchtune FILE: the config's keys under its recipe (torchtune.h), flags
 * given as well winning; or, with `model` set, only the model it builds. */
static int torchtune_file(const est_cli *cli, const est_given *given, est_run *run, char *model, size_t modellen,
                          char *err, size_t errlen) {
    est_tt_recipe recipe;
    if (est_torchtune_recipe(cli->torchtune, cli->torchtune_recipe, &recipe, err, errlen) < 0) return -1;
    cJSON *tt = est_torchtune_load(cli->torchtune, err, errlen);
    if (!tt) return -1;
    int rc = 0;
    char used[400];
    if (model) rc = est_torchtune_model(tt, model, modellen, err, errlen);
    else if ((rc = est_torchtune_apply(tt, recipe, given, run, used, sizeof used, err, errlen)) == 0) {
        const char *base = strrchr(cli->torchtune, '/');
        size_t len = strlen(run->settings_from);
        snprintf(run->settings_from + len, sizeof run->settings_from - len, "%s%s (%s): %s", len ? "; from " : "",
                 base ? base + 1 : cli->torchtune, est_torchtune_recipe_name(recipe),
                 used[0] ? used : "nothing that changes memory");
    }
    cJSON_Delete(tt);
    return rc;
}

/* The model, the GPU and the training YAML's settings (--axolotl). */
static int build_base(const est_cli *cli, const est_gpu_catalog *cat, est_run *run, char *err,
                      size_t errlen) {
    cJSON *ax = NULL;
    char ax_model[EST_PATH_MAX] = "";
    const char *model_arg = cli->model;
    if (cli->axolotl[0]) {
        if (!(ax = est_axolotl_load(cli->axolotl, err, errlen))) return -1;
        if (!cli->model[0]) {
            int r = est_axolotl_model(ax, cli->axolotl, ax_model, sizeof ax_model, err, errlen);
            if (r < 0) goto fail;
            if (r == 0) model_arg = ax_model;
        }
    }
    if (cli->torchtune[0] && !model_arg[0]) {
        if (torchtune_file(cli, NULL, NULL, ax_model, sizeof ax_model, err, errlen) < 0) goto fail;
        model_arg = ax_model;
    }
    if (!model_arg[0]) {
        ft_errorf(err, errlen, "--model is required (see `ftest models`)");
        goto fail;
    }
    est_model_source src;
    if (est_model_source_resolve(model_arg, &src, err, errlen) < 0) goto fail;
    ft_model model;
    if (ft_model_load(src.config, &model, err, errlen) < 0) {
        /* A cached config is labelled by its snapshot folder: name the repo instead. */
        const char *rest = strstr(err, ": ");
        if (!strcmp(src.origin, "the Hugging Face cache") && rest) {
            char inner[400];
            ft_strlcpy(inner, rest + 2, sizeof inner);
            ft_errorf(err, errlen, "%s (Hugging Face cache): %s", model_arg, inner);
        }
        goto fail;
    }
    if (!strcmp(src.origin, "the Hugging Face cache")) /* name it ORG/NAME's NAME, not the commit */
        ft_strlcpy(model.name, strchr(model_arg, '/') + 1, sizeof model.name);
    const char *gname = cli->gpu[0] ? cli->gpu : EST_DEFAULT_GPU;
    const est_gpu *gpu = find_gpu(cat, gname, cli);
    if (!gpu) {
        est_gpu_unknown(cat, gname, err, errlen);
        goto fail;
    }
    est_run_defaults(run, &model, gpu);
    /* the stack first: the config readers read its versions (accelerate_config.c) */
    if (cli->stack[0] && est_stack_parse(cli->stack, &run->stack, err, errlen) < 0) goto fail;
    if (src.have_weights) note_weights(&model, &src.weights, run);
    est_given given;
    est_cli_given(cli, &given);
    if (ax) {
        char used[600];
        if (est_axolotl_apply(ax, cli->axolotl, &given, run, used, sizeof used, err, errlen) < 0) goto fail;
        const char *base = strrchr(cli->axolotl, '/');
        snprintf(run->settings_from, sizeof run->settings_from, "%s: %s", base ? base + 1 : cli->axolotl,
                 used[0] ? used : "nothing that changes memory");
        cJSON_Delete(ax);
        ax = NULL;
    }
    if (cli->torchtune[0] && torchtune_file(cli, &given, run, NULL, 0, err, errlen) < 0) goto fail;
    if (cli->accelerate[0]) {
        if (!(ax = est_yaml_load(cli->accelerate, err, errlen))) return -1;
        char used[340];
        if (est_accelerate_apply(ax, cli->accelerate, &given, run, used, sizeof used, err, errlen) < 0)
            goto fail;
        const char *base = strrchr(cli->accelerate, '/');
        size_t len = strlen(run->settings_from);
        snprintf(run->settings_from + len, sizeof run->settings_from - len, "%s%s: %s",
                 len ? "; from " : "", base ? base + 1 : cli->accelerate,
                 used[0] ? used : "nothing that changes memory");
        cJSON_Delete(ax);
    }
    return 0;
fail:
    cJSON_Delete(ax);
    return -1;
}

/* Host RAM per node: --host-ram, or the catalog's median ratio of host RAM to
 * GPU memory (models/instances.json, or --catalog) times the node's GPUs. */
static int host_ram(const est_cli *cli, const est_gpu_catalog *cat, est_run *run, char *err,
                    size_t errlen) {
    if (cli->host_ram_set) {
        run->host_ram_bytes = (int64_t)(cli->host_ram_gib * 1073741824.0);
        if (run->host_ram_bytes < 1) return ft_errorf(err, errlen, "--host-ram is below one byte");
        return 0;
    }
    est_instance_catalog ic;
    if (est_instances_load(cli->catalog[0] ? cli->catalog : NULL, cat, &ic, err, errlen) < 0)
        return -1;
    run->host_ram_per_gpu_memory = est_instances_host_ratio_median(&ic);
    est_instances_free(&ic);
    return 0;
}

/* FSDP's own flags, which mean nothing under another framework. */
static int apply_fsdp(const est_cli *cli, est_run *run, char *err, size_t errlen) {
    if (cli->fsdp_version_set) run->fsdp_version = cli->fsdp_version;
    if (cli->load_dtype_set) run->load_dtype = cli->load_dtype;
    if (cli->fsdp_reduce_set) run->fsdp_reduce = cli->fsdp_reduce;
    if (cli->fsdp_prefetch_set) run->fsdp_backward_prefetch = cli->fsdp_prefetch;
    if (cli->fsdp_forward_prefetch) run->fsdp_forward_prefetch = true;
    if (cli->fsdp_shard_ends) run->fsdp_shard_ends = true;
    if (cli->fsdp_shard_ends && est_fw_models(run, EST_FEAT_FSDP_OPTIONS, "--fsdp-shard-ends", err, errlen) < 0)
        return -1;
    if (cli->fsdp_lora_wrap_set) run->fsdp_lora_wrap = cli->fsdp_lora_wrap;
    if (cli->fsdp_lora_wrap_set && est_fw_models(run, EST_FEAT_FSDP_OPTIONS, "--fsdp-lora-wrap", err, errlen) < 0)
        return -1;
    if (cli->fsdp_wrapper_set) run->fsdp_wrapper = cli->fsdp_wrapper;
    if (cli->fsdp_wrapper_set && est_fw_models(run, EST_FEAT_FSDP_OPTIONS, "--fsdp-wrapper", err, errlen) < 0)
        return -1;
    if ((cli->fsdp_version_set || cli->fsdp_reduce_set || cli->fsdp_prefetch_set || cli->fsdp_forward_prefetch) &&
        est_fw_models(run, EST_FEAT_FSDP_OPTIONS,
                      "--fsdp-version, --fsdp-reduce-dtype, --fsdp-backward-prefetch and --fsdp-forward-prefetch",
                      err, errlen) < 0)
        return -1;
    if ((cli->fsdp_prefetch_set || cli->fsdp_forward_prefetch) && run->fsdp_version == EST_FSDP2)
        return ft_errorf(err, errlen, "--fsdp-backward-prefetch and --fsdp-forward-prefetch are FSDP1's; "
                                      "FSDP2 prefetches one unit back in backward by itself");
    return 0;
}

int est_cli_build_run(const est_cli *cli, const est_gpu_catalog *cat, est_run *run, char *err,
                      size_t errlen) {
    if (build_base(cli, cat, run, err, errlen) < 0) return -1;
    const ft_model model = run->model;
    /* A DeepSpeed config sets strategy, precision and batch; flags given too
     * win. Its keys are listed in the report's "from" line. */
    if (cli->ds_config[0]) {
        char used[sizeof run->settings_from];
        if (est_ds_config_load_noted(cli->ds_config, run, used, sizeof used, err, errlen) < 0) return -1;
        const char *base = strrchr(cli->ds_config, '/');
        size_t len = strlen(run->settings_from);
        snprintf(run->settings_from + len, sizeof run->settings_from - len, "%s%s: %s", len ? "; from " : "",
                 base ? base + 1 : cli->ds_config, used[0] ? used : "nothing that changes memory");
    }
    if (cli->gpus_set) run->gpus_per_node = cli->gpus;
    if (cli->nodes_set) run->nodes = cli->nodes;
    if (cli->batch_set) run->micro_batch = cli->batch;
    if (cli->grad_accum_set) run->grad_accum = cli->grad_accum;
    if (cli->seq_set) run->seq_len = cli->seq;
    if (cli->layers_set) {
        if (cli->layers > model.num_layers)
            return ft_errorf(err, errlen, "--layers %lld: %s has %lld layers", (long long)cli->layers,
                             model.name, (long long)model.num_layers);
        run->layers_used = cli->layers;
    }
    if (cli->precision_set) run->precision = cli->precision;
    if (cli->framework_set) {
        run->framework = cli->framework;
        if (est_fw_of(run)->attention_default >= 0) run->attention = (est_attention)est_fw_of(run)->attention_default;
    }
    if (cli->zero_set) run->zero_stage = cli->zero;
    /* A strategy flag without --framework: ZeRO 0 without offload is plain DDP. */
    if (!cli->framework_set && cli->zero_set && cli->zero == 0 && !cli->offload_set)
        run->framework = est_fw_trainer();
    if (cli->offload_set) run->offload = cli->offload;
    if (cli->checkpointing_set) run->checkpointing = cli->checkpointing;
    if (cli->attention_set) run->attention = cli->attention;
    if (cli->loss_set) run->loss = cli->loss;
    if (cli->optimizer_set) run->optimizer = cli->optimizer;
    if (cli->adamw_impl != EST_ADAMW_DEFAULT) run->adamw_impl = cli->adamw_impl;
    /* The HF Trainer's other optimizers (and fused AdamW) are modelled on hf
     * only: go there unless a framework was asked for. */
    if (((cli->optimizer_set && cli->optimizer != EST_OPT_ADAMW && cli->optimizer != EST_OPT_SGD) ||
         cli->adamw_impl == EST_ADAMW_FUSED) &&
        !cli->framework_set && !cli->ds_config[0] && !cli->axolotl[0] && !cli->accelerate[0] && !cli->torchtune[0])
        run->framework = est_fw_trainer();
    if (est_cli_apply_lora(cli, run, err, errlen) < 0 || est_cli_apply_peft(cli, run, err, errlen) < 0)
        return -1;
    /* No stage asked for (by flag or config file): LoRA starts where its
     * framework models it (DeepSpeed: ZeRO-1), and the search goes on from there. */
    if (run->lora.rank > 0 && !cli->zero_set && !cli->ds_config[0] && !cli->axolotl[0] && !cli->accelerate[0] && !cli->torchtune[0] &&
        est_fw_first_stage(run, EST_FEAT_LORA) > run->zero_stage)
        run->zero_stage = est_fw_first_stage(run, EST_FEAT_LORA);
    if (est_ds_config_resolve(run, cli->grad_accum_set, err, errlen) < 0) return -1;
    if (cli->router_aux_loss) {
        if (run->model.num_experts == 0)
            return ft_errorf(err, errlen, "--router-aux-loss applies to mixture-of-experts models");
        run->model.output_router_logits = true;
    }
    est_cli_apply_objective(cli, run);
    if (est_cli_apply_liger(cli, run, err, errlen) < 0) return -1;
    if (cli->optimizer_in_backward) run->optimizer_in_backward = true; /* or the YAML's (torchtune.c) */
    if (cli->activation_offload) run->activation_offload = true; /* or the YAML's (axolotl.c) */
    if (cli->kernels_set) run->kernels = cli->kernels;
    run->expandable_segments = cli->expandable_segments;
    run->padding_mask = cli->padding_mask;
    if (cli->inter_node_gb_per_s > 0) run->inter_node_gb_per_s = cli->inter_node_gb_per_s;
    if (cli->no_zero_init) run->zero_init = false;
    if (cli->stack[0] && est_stack_parse(cli->stack, &run->stack, err, errlen) < 0) return -1;
    if (host_ram(cli, cat, run, err, errlen) < 0) return -1;
    if (cli->tight_margin_set) run->tight_margin_frac = cli->tight_margin_pct / 100;
    if (apply_fsdp(cli, run, err, errlen) < 0) return -1;
    /* Elsewhere the loaded dtype changes nothing on the GPU that another flag
     * does not say: DeepSpeed casts the module itself, and bf16 weights under
     * the HF Trainer's autocast train as --precision bf16. */
    if (run->load_dtype == EST_LOAD_BF16 && est_fw_models(run, EST_FEAT_LOAD_DTYPE, NULL, err, errlen) < 0) return -1;
    return est_run_validate(run, err, errlen);
}
