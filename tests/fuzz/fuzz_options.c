/* libFuzzer target: the ftest option parser and run validation. The input is
 * split at newlines into argv; whatever parses must build a run that either
 * validates or is refused with a message, never crashes or overflows. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "estimate.h"
#include "options.h"
#include "fuzz_argv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[FUZZ_MAX_ARGS + 1];
    int argc = fuzz_split_argv(buf, "ftest", argv);
    static est_cli cli;
    char err[256];
    if (est_cli_parse(argc, argv, &cli, err, sizeof err) == 0) {
        /* Exercise validation and the model on a fixed small model with the
         * parsed knobs, the way the CLI would. */
        ft_model m = {.arch = FT_ARCH_LLAMA, .vocab_size = 32000, .hidden_size = 2048,
                      .intermediate_size = 5632, .num_layers = 22, .num_heads = 32,
                      .num_kv_heads = 4, .head_dim = 64, .max_position = 2048};
        est_run run;
        est_run_defaults(&run, &m, NULL);
        run.gpu.memory_bytes = INT64_C(80) << 30;
        if (cli.gpus_set) run.gpus_per_node = cli.gpus;
        if (cli.nodes_set) run.nodes = cli.nodes;
        if (cli.batch_set) run.micro_batch = cli.batch;
        if (cli.seq_set) run.seq_len = cli.seq;
        if (cli.grad_accum_set) run.grad_accum = cli.grad_accum;
        if (cli.zero_set) run.zero_stage = cli.zero;
        if (cli.offload_set) run.offload = cli.offload;
        if (cli.checkpointing_set) run.checkpointing = cli.checkpointing;
        if (cli.attention_set) run.attention = cli.attention;
        if (cli.loss_set) run.loss = cli.loss;
        if (cli.precision_set) run.precision = cli.precision;
        if (cli.framework_set && cli.framework != EST_FW_FTRAIN) run.framework = cli.framework;
        if (cli.host_ram_set) run.host_ram_bytes = (int64_t)(cli.host_ram_gib * 1073741824.0);
        else run.host_ram_per_gpu_memory = 2.5;
        est_estimate e;
        est_estimate_init(&e);
        if (cli.tight_margin_set) e.tight_margin_frac = cli.tight_margin_pct / 100;
        if (est_estimate_run(&run, &e, err, sizeof err) == 0 &&
            (e.peak_allocated_bytes <= 0 || e.device_used_bytes < e.peak_allocated_bytes ||
             e.host_peak_per_node_bytes < 0 || (e.fits && e.host_ram_bytes > 0 &&
                                                e.host_peak_per_node_bytes > e.host_ram_bytes) ||
             (e.tight && !e.fits)))
            abort();
        est_estimate_free(&e);
    }
    free(buf);
    return 0;
}
