#include "cli_run.h"

#include "ds_config.h"
#include "instances.h"
#include "json_util.h"

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

int est_cli_build_run(const est_cli *cli, const est_gpu_catalog *cat, est_run *run, char *err,
                      size_t errlen) {
    if (!cli->model[0]) return ft_errorf(err, errlen, "--model is required (see `ftest models`)");
    ft_model model;
    if (ft_model_load(cli->model, &model, err, errlen) < 0) return -1;
    const char *gname = cli->gpu[0] ? cli->gpu : EST_DEFAULT_GPU;
    const est_gpu *gpu = est_gpu_find(cat, gname);
    if (!gpu) return est_gpu_unknown(cat, gname, err, errlen);

    est_run_defaults(run, &model, gpu);
    /* A DeepSpeed config sets strategy, precision and batch; flags given too win. */
    if (cli->ds_config[0] && est_ds_config_load(cli->ds_config, run, err, errlen) < 0) return -1;
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
        if (cli->framework == EST_FW_FTRAIN) run->attention = EST_ATTN_FLASH;
    }
    if (cli->zero_set) run->zero_stage = cli->zero;
    /* A strategy flag without --framework: ZeRO 0 without offload is plain DDP. */
    if (!cli->framework_set && cli->zero_set && cli->zero == 0 && !cli->offload_set)
        run->framework = EST_FW_HF;
    if (cli->offload_set) run->offload = cli->offload;
    if (cli->checkpointing_set) run->checkpointing = cli->checkpointing;
    if (cli->attention_set) run->attention = cli->attention;
    if (cli->loss_set) run->loss = cli->loss;
    if (cli->optimizer_set) run->optimizer = cli->optimizer;
    run->expandable_segments = cli->expandable_segments;
    run->padding_mask = cli->padding_mask;
    if (cli->inter_node_gb_per_s > 0) run->inter_node_gb_per_s = cli->inter_node_gb_per_s;
    if (cli->no_zero_init) run->zero_init = false;
    if (cli->stack[0] && est_stack_parse(cli->stack, &run->stack, err, errlen) < 0) return -1;
    if (host_ram(cli, cat, run, err, errlen) < 0) return -1;
    if (cli->fsdp_version_set) run->fsdp_version = cli->fsdp_version;
    if (cli->load_dtype_set) run->load_dtype = cli->load_dtype;
    if (cli->fsdp_reduce_set) run->fsdp_reduce = cli->fsdp_reduce;
    if ((cli->fsdp_version_set || cli->fsdp_reduce_set) && run->framework != EST_FW_FSDP)
        return ft_errorf(err, errlen, "--fsdp-version and --fsdp-reduce-dtype need --framework fsdp");
    /* Elsewhere the loaded dtype changes nothing on the GPU that another flag
     * does not say: DeepSpeed casts the module itself, and bf16 weights under
     * the HF Trainer's autocast train as --precision bf16. */
    if (run->load_dtype == EST_LOAD_BF16 && run->framework != EST_FW_FSDP)
        return ft_errorf(err, errlen, "--load-dtype bf16 needs --framework fsdp (with --framework hf, "
                                      "bf16-loaded weights train as --precision bf16)");
    return est_run_validate(run, err, errlen);
}
