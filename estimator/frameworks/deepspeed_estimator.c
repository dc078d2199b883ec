#include "deepspeed_estimator.h"

#include "params.h"

void est_ds_count(const ft_model *m, est_ds_counts *out) {
    est_params p;
    est_count_params(m, m->num_layers, &p);
    out->total_params = p.total;
    /* Modules with their own parameters: embed_tokens and lm_head (V*h each),
     * each Linear (its weight and bias), each RMSNorm. A tied lm_head still
     * lists the shared weight, so it counts as a V*h layer either way. */
    int64_t largest = m->vocab_size * m->hidden_size;
    const int64_t linears[] = {p.layer.q, p.layer.k, p.layer.v, p.layer.o,
                               p.layer.gate, p.layer.up, p.layer.down};
    for (size_t i = 0; i < sizeof linears / sizeof linears[0]; i++)
        if (linears[i] > largest) largest = linears[i];
    out->largest_layer_params = largest;
}

/* Python's int() of a float product: truncation toward zero. Python's int has
 * no upper bound; past int64 (a CPU figure for tens of thousands of ranks) the
 * value saturates instead of the cast's undefined behaviour (negative GB). */
static int64_t py_int(double x) { return x < 0x1p63 ? (int64_t)x : INT64_MAX; }

est_ds_mem est_ds_zero2(int64_t total_params, int64_t gpus_per_node, int64_t nodes,
                        bool cpu_offload) {
    const int64_t total_gpus = nodes * gpus_per_node;
    const double P = (double)total_params;
    est_ds_mem r;
    if (cpu_offload) {
        r.gpu_bytes = 2 * total_params;
        double per = 4.0 * (double)total_gpus > 16 ? 4.0 * (double)total_gpus : 16;
        r.cpu_bytes = py_int(P * per * EST_DS_BUFFER_FACTOR);
    } else {
        r.gpu_bytes = 4 * total_params + py_int(16.0 * P / (double)total_gpus);
        r.cpu_bytes = py_int(P * 4 * (double)gpus_per_node * EST_DS_BUFFER_FACTOR);
    }
    return r;
}

est_ds_mem est_ds_zero3(int64_t total_params, int64_t largest_layer_params, int64_t gpus_per_node,
                        int64_t nodes, bool cpu_offload, bool cpu_offload_params, bool zero_init) {
    const int64_t total_gpus = nodes * gpus_per_node;
    const double gpus_factor = 1.0 / (double)nodes;
    const double P = (double)total_params, F = EST_DS_BUFFER_FACTOR;
    const int64_t largest_layer_memory = 4 * largest_layer_params;
    const double g4 = 4.0 * (double)gpus_per_node;
    est_ds_mem r;
    if (cpu_offload) {
        if (cpu_offload_params) {
            r.gpu_bytes = largest_layer_memory;
            double per = zero_init ? 18 * gpus_factor : (g4 > 18 * gpus_factor ? g4 : 18 * gpus_factor);
            r.cpu_bytes = py_int(P * per * F);
        } else {
            r.gpu_bytes = largest_layer_memory + py_int(2.0 * P / (double)total_gpus);
            double per = zero_init ? 16 * gpus_factor : (g4 > 16 * gpus_factor ? g4 : 16 * gpus_factor);
            r.cpu_bytes = py_int(P * per * F);
        }
    } else {
        r.gpu_bytes = largest_layer_memory + py_int(18.0 * P / (double)total_gpus);
        r.cpu_bytes = zero_init ? py_int((double)largest_layer_params * g4 * F)
                                : py_int(P * g4 * F);
    }
    return r;
}

static void header(FILE *out, int64_t gpus_per_node, int64_t nodes) {
    fprintf(out,
            "Estimated memory needed for params, optim states and gradients for a:\n"
            "HW: Setup with %lld %s, %lld %s per node.\n",
            (long long)nodes, nodes > 1 ? "nodes" : "node", (long long)gpus_per_node,
            gpus_per_node > 1 ? "GPUs" : "GPU");
}

static void row(FILE *out, est_ds_mem m, const char *options) {
    fprintf(out, " %7.2fGB | %6.2fGB | %s\n", (double)m.cpu_bytes / 1073741824.0,
            (double)m.gpu_bytes / 1073741824.0, options);
}

void est_ds_print_tables(FILE *out, const ft_model *m, int64_t gpus_per_node, int64_t nodes) {
    est_ds_counts c;
    est_ds_count(m, &c);
    fprintf(out, "DeepSpeed estimate_zero2_model_states_mem_needs_all_live (model states only):\n");
    header(out, gpus_per_node, nodes);
    fprintf(out, "SW: Model with %lldM total params.\n", (long long)(c.total_params / 1000000));
    fprintf(out, "  per CPU  |  per GPU |   Options\n");
    row(out, est_ds_zero2(c.total_params, gpus_per_node, nodes, true), "offload_optimizer=cpu ");
    row(out, est_ds_zero2(c.total_params, gpus_per_node, nodes, false), "offload_optimizer=none");

    fprintf(out, "\nDeepSpeed estimate_zero3_model_states_mem_needs_all_live (model states only):\n");
    header(out, gpus_per_node, nodes);
    fprintf(out, "SW: Model with %lldM total params, %lldM largest layer params.\n",
            (long long)(c.total_params / 1000000), (long long)(c.largest_layer_params / 1000000));
    fprintf(out, "  per CPU  |  per GPU |   Options\n");
    for (int off = 1; off >= 0; off--)
        for (int offp = 1; offp >= 0; offp--) {
            if (!off && offp) continue;
            for (int zi = 1; zi >= 0; zi--) {
                char opts[96];
                snprintf(opts, sizeof opts, "offload_param=%s, offload_optimizer=%s, zero_init=%d",
                         offp ? "cpu " : "none", off ? "cpu " : "none", zi);
                row(out, est_ds_zero3(c.total_params, c.largest_layer_params, gpus_per_node, nodes,
                                      off, offp, zi),
                    opts);
            }
        }
}

const char *est_deepspeed_not_comparable(const est_run *r) {
    /* Both functions count every parameter as trained, with 2-byte weights
     * and gradients and 12 bytes of fp32 AdamW state (master, m, v) per
     * parameter (stage_1_and_2.py: 4 * params on each GPU plus 16 * params
     * shared; stage3.py: 18 * params shared, 4 * the largest layer). */
    if (r->framework != EST_FW_DEEPSPEED || r->zero_stage < 1) return NULL;
    if (r->lora.rank > 0) return "LoRA trains the adapters only";
    if (r->quant != EST_QUANT_NONE) return "the base is quantized";
    if (r->optimizer != EST_OPT_ADAMW) return "the optimizer keeps other state than AdamW";
    if (r->precision != EST_PREC_BF16_MIXED && r->precision != EST_PREC_FP16_MIXED)
        return "the weights are not 2-byte copies of fp32 masters (mixed precision)";
    return NULL;
}

int64_t est_deepspeed_figure(const est_run *r, const char **fn) {
    *fn = NULL;
    /* Only where the figure describes this run: DeepSpeed ZeRO, full
     * fine-tuning, AdamW, mixed precision (issue 20, item 14: a QLoRA run
     * under FSDP was shown ZeRO-3's full fine-tuning figure). */
    if (r->framework != EST_FW_DEEPSPEED || est_deepspeed_not_comparable(r)) return 0;
    est_ds_counts c;
    est_ds_count(&r->model, &c);
    bool off = r->offload != EST_OFFLOAD_NONE, offp = r->offload == EST_OFFLOAD_OPTIMIZER_PARAMS;
    if (r->zero_stage == 3) {
        *fn = "estimate_zero3_model_states_mem_needs_all_live";
        return est_ds_zero3(c.total_params, c.largest_layer_params, r->gpus_per_node, r->nodes, off,
                            offp, true).gpu_bytes;
    }
    if (r->zero_stage >= 1) {
        *fn = "estimate_zero2_model_states_mem_needs_all_live";
        return est_ds_zero2(c.total_params, r->gpus_per_node, r->nodes, off).gpu_bytes;
    }
    *fn = NULL;
    return 0;
}
