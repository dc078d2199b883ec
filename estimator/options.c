#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp_policy.h"
#include "json_util.h"
#include "lora.h"
#include "suggest.h"

const char est_usage[] =
    "usage: ftest [command] --model NAME|config.json [options]\n"
    "\n"
    "Will an LLM fine-tune fit in GPU memory? ftest walks one training step moment by\n"
    "moment and reports each GPU's peak, where it happens and what it is made of.\n"
    "\n"
    "commands:\n"
    "  (none)              estimate; without --zero/--offload/--checkpointing, recommend a\n"
    "                      strategy and compare the usual alternatives\n"
    "  models              list shipped models with their parameter counts\n"
    "  gpus                list the GPU catalog\n"
    "  check FILE...       estimate measurement records and compare (exit 1 if any is\n"
    "                      outside its tolerance)\n"
    "  constants           the model's constants in force, with their sources\n"
    "  sweep               tabulate along --seq A:B[:STEP] or --batch A:B[:STEP]\n"
    "  timeline            memory at every moment of one step\n"
    "  plan                rank instances by time and cost for --tokens T\n"
    "  fit FILE...         fit profile constants from records into --out DIR (required;\n"
    "                      the directory is replaced by the new profile set as a whole)\n"
    "  stacks              list the software stacks (framework versions) ftest models\n"
    "  calibrate           run a grid of measured training runs into records, then fit\n"
    "                      and check them (see ftest calibrate --help)\n"
    "\n"
    "run:\n"
    "  --model NAME|PATH   shipped model (see `ftest models`), a Hugging Face config.json,\n"
    "                      a model folder, a .safetensors file or index (headers only), or\n"
    "                      ORG/NAME from the local Hugging Face cache (no network)\n"
    "  --gpu NAME          GPU type (see `ftest gpus`); default h100-80gb\n"
    "  --gpus N            GPUs per node (default 1)\n"
    "  --nodes N           nodes (default 1)\n"
    "  --batch N           micro-batch per GPU (default 1)\n"
    "  --grad-accum N      micro-batches per optimizer step (default 1)\n"
    "  --seq N             tokens per sequence (default 2048, capped at the model's maximum)\n"
    "  --layers N          only the first N decoder blocks\n"
    "  --precision P       fp32 | bf16-mixed | fp16-mixed | bf16 (default bf16-mixed)\n"
    "  --zero S            ZeRO stage 0 | 1 | 2 | 3 (0 = DDP)\n"
    "  --offload O         none | optimizer | optimizer+params\n"
    "  --checkpointing C   none | selective | full\n"
    "  --attention A       eager | sdpa | flash (default sdpa; ftrain: flash)\n"
    "  --loss L            standard | chunked (fused linear cross-entropy)\n"
    "  --optimizer O       adamw | adamw-8bit | paged-adamw-8bit | paged-adamw-32bit |\n"
    "                      adafactor | adafactor-beta1 | lion | sgd | sgd-momentum\n"
    "                      (default adamw; all but adamw and sgd: --framework hf only)\n"
    "  --framework F       ftrain | hf | deepspeed | fsdp (default deepspeed; hf with\n"
    "                      LoRA or an optimizer only hf models)\n"
    "  --deepspeed-config FILE  take stage, offload, precision, batch and bucket sizes\n"
    "                      from a DeepSpeed config (flags given as well win; \"auto\"\n"
    "                      takes the flags' values, as the HF Trainer fills it)\n"
    "  --axolotl FILE      take model, adapter, LoRA, quantization, batch, sequence,\n"
    "                      optimizer, checkpointing, precision and DeepSpeed/FSDP from an\n"
    "                      axolotl YAML (flags given as well win)\n"
    "  --accelerate-config FILE  take processes, machines, mixed precision and the\n"
    "                      FSDP/DeepSpeed plugin from accelerate's config YAML\n"
    "  --expandable-segments  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
    "  --padding-mask      batches are padded: attention gets an explicit mask\n"
    "  --no-zero-init      ZeRO-3: the model was built before DeepSpeed was configured\n"
    "                      (from_pretrained, then TrainingArguments(deepspeed=...)), so it\n"
    "                      is partitioned at initialize, not built under zero.Init\n"
    "  --stack NAME        framework versions to model (see `ftest stacks`; default 2025-02)\n"
    "  --host-ram GIB      host RAM per node, part of the verdict (default: the median\n"
    "                      host-RAM-to-GPU-memory ratio of the instance catalog x the\n"
    "                      node's GPU memory; plan uses each instance's own)\n"
    "  --tight-margin PCT  a fit with less room than PCT% of the GPU (or host) memory is\n"
    "                      reported as tight (default 5)\n"
    "  --fsdp-version V    fsdp: 1 (FlatParameter, the default) | 2 (fully_shard, torch >= 2.4)\n"
    "  --load-dtype D      fp32 | bf16: dtype the weights were loaded in (torch_dtype; default fp32)\n"
    "  --fsdp-reduce-dtype R  fsdp: param (reduce in the compute dtype, the default) | fp32\n"
    "  --router-aux-loss   MoE: output_router_logits=True (the load-balancing loss)\n"
    "\n"
    "LoRA (PEFT on the HF Trainer; the base is frozen in the compute dtype):\n"
    "  --lora-rank R       train rank-R adapters only (default: full fine-tuning)\n"
    "  --lora-alpha A      lora_alpha (default 8; scaling only, no memory effect)\n"
    "  --lora-targets T    comma list of q,k,v,o,gate,up,down, or all-linear\n"
    "                      (default q,v: PEFT's default for Llama, Mistral, Qwen2)\n"
    "  --lora-dropout P    dropout on the adapter input, 0 <= P < 1 (default 0)\n"
    "  --quant Q           none | nf4 | int8: QLoRA's quantized frozen base (bitsandbytes;\n"
    "                      needs --lora-rank and bf16-mixed or fp16-mixed)\n"
    "  --compute-dtype D   auto | bf16 | fp16 | fp32: bnb_4bit_compute_dtype (auto: the\n"
    "                      precision's compute dtype)\n"
    "  --no-double-quant   nf4 without double quantization of the block constants\n"
    "\n"
    "single-device recipes (--framework hf, one GPU):\n"
    "  --optimizer-in-backward  step each parameter in its gradient hook and free the\n"
    "                      gradient (no gradient buffers, no clipping, --grad-accum 1)\n"
    "  --activation-offload  move saved activations to pinned host memory\n"
    "                      (torch.autograd.graph.save_on_cpu)\n"
    "\n"
    "questions:\n"
    "  --max-batch         largest micro-batch that fits, and the one with the best\n"
    "                      tokens/s among those that fit (often smaller)\n"
    "  --max-seq           longest sequence that fits\n"
    "  --min-gpus          fewest GPUs of the chosen type that fit\n"
    "\n"
    "output:\n"
    "  --json              every term, machine-readable\n"
    "  --deepspeed-table   DeepSpeed's estimate_zero2/zero3 tables for this model\n"
    "  --csv FILE          sweep: one line per point (- for standard output)\n"
    "  --svg FILE          sweep, timeline: the chart (checked writable before any work)\n"
    "  --records FILE      sweep: measured points of matching records, drawn on the chart\n"
    "                      (files are replaced atomically; an option a command does not\n"
    "                      use is refused)\n"
    "  --no-profile        built-in constants only (a profile that fails to load is an error)\n"
    "  --quiet             check: failures and the summary only\n"
    "  --markdown          check: tables for docs/validation.md\n"
    "\n"
    "plan:\n"
    "  --tokens T          training tokens (accepts K, M, B, T suffixes)\n"
    "                      plan tries 1, 2, 4, ... 32 nodes of instances with a network\n"
    "  --epochs E          passes over --tokens (default 1)\n"
    "  --global-batch G    sequences per optimizer step over all GPUs (default 64, the\n"
    "                      Llama 2 fine-tuning batch; `free`: each plan's largest\n"
    "                      micro-batch on every GPU, no accumulation)\n"
    "  --inter-node-gbps B network between nodes, GB/s per node (plan: replaces each\n"
    "                      instance's; estimate with --nodes: replaces the profile's)\n"
    "  --max-hours H, --max-cost D, --catalog FILE\n"
    "\n"
    "exit status: 0 fits / check passed, 1 does not fit / check failed, 2 bad input\n"
    "or output that could not be written (docs/reliability.md).\n";

int est_parse_int(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out,
                  char *err, size_t errlen) {
    if (!s || !*s) return ft_errorf(err, errlen, "%s needs a value", opt);
    for (const char *c = s; *c; c++)
        if (!isdigit((unsigned char)*c) && !(c == s && *c == '-'))
            return ft_errorf(err, errlen, "%s: \"%.40s\" is not a whole number", opt, s);
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end) /* "-" alone */
        return ft_errorf(err, errlen, "%s: \"%.40s\" is not a whole number", opt, s);
    if (errno == ERANGE || v < min || v > max)
        return ft_errorf(err, errlen, "%s must be between %lld and %lld (got %.40s)", opt,
                         (long long)min, (long long)max, s);
    *out = v;
    return 0;
}

/* A positive number with an optional K/M/B/T (1e3..1e12) suffix. */
static int parse_amount(const char *opt, const char *s, double max, double *out, char *err,
                        size_t errlen) {
    if (!s || !*s) return ft_errorf(err, errlen, "%s needs a value", opt);
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s) return ft_errorf(err, errlen, "%s: \"%.40s\" is not a number", opt, s);
    double scale = 1;
    if (*end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': scale = 1e3; break;
        case 'M': scale = 1e6; break;
        case 'B': case 'G': scale = 1e9; break;
        case 'T': scale = 1e12; break;
        default: return ft_errorf(err, errlen, "%s: \"%.40s\" is not a number", opt, s);
        }
        if (end[1]) return ft_errorf(err, errlen, "%s: \"%.40s\" is not a number", opt, s);
    }
    v *= scale;
    if (!isfinite(v) || v <= 0 || v > max)
        return ft_errorf(err, errlen, "%s must be positive and at most %g (got %.40s)", opt, max, s);
    *out = v;
    return 0;
}

/* A plain decimal number in [min, max]: no suffix. */
static int parse_real(const char *opt, const char *s, double min, double max, double *out,
                      char *err, size_t errlen) {
    if (!s || !*s) return ft_errorf(err, errlen, "%s needs a value", opt);
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v))
        return ft_errorf(err, errlen, "%s: \"%.40s\" is not a number", opt, s);
    if (v < min || v > max)
        return ft_errorf(err, errlen, "%s must be between %g and %g (got %.40s)", opt, min, max, s);
    *out = v;
    return 0;
}

static int parse_range(const char *opt, const char *s, est_range *r, char *err, size_t errlen) {
    char buf[96];
    if (!s || !ft_strlcpy(buf, s, sizeof buf))
        return ft_errorf(err, errlen, "%s needs START:STOP[:STEP]", opt);
    char *parts[3] = {buf, NULL, NULL};
    int n = 1;
    for (char *c = buf; *c; c++)
        if (*c == ':') {
            if (n == 3) return ft_errorf(err, errlen, "%s: \"%.40s\" is not START:STOP[:STEP]", opt, s);
            *c = '\0';
            parts[n++] = c + 1;
        }
    int64_t v[3] = {0, 0, 1};
    for (int i = 0; i < n; i++)
        if (est_parse_int(opt, parts[i], 1, (int64_t)1 << 24, &v[i], err, errlen) < 0) return -1;
    if (n == 1) v[1] = v[0];
    if (v[1] < v[0]) return ft_errorf(err, errlen, "%s: STOP is below START", opt);
    if ((v[1] - v[0]) / v[2] > 100000)
        return ft_errorf(err, errlen, "%s: more than 100000 points; use a larger STEP", opt);
    r->start = v[0];
    r->stop = v[1];
    r->step = v[2];
    return 0;
}

static int copy_path(const char *opt, const char *s, char *dst, size_t n, char *err, size_t errlen) {
    if (!s || !*s) return ft_errorf(err, errlen, "%s needs a value", opt);
    if (!ft_strlcpy(dst, s, n)) return ft_errorf(err, errlen, "%s: value is too long", opt);
    return 0;
}

/* The options the help text names ("--gpu", "--json", ...): the help is the
 * option table, so an option added to it is suggested with no second list. */
static size_t help_options(char names[][32], size_t max) {
    size_t n = 0;
    for (const char *c = est_usage; *c && n < max; c++) {
        if (c[0] != '-' || c[1] != '-' || !(c == est_usage || c[-1] == ' ' || c[-1] == '\n')) continue;
        size_t len = 2;
        while (isalnum((unsigned char)c[len]) || c[len] == '-') len++;
        if (len < 4 || len >= sizeof names[0]) continue;
        bool dup = false;
        for (size_t k = 0; k < n && !dup; k++) dup = !strncmp(names[k], c, len) && !names[k][len];
        if (dup) continue;
        memcpy(names[n], c, len);
        names[n++][len] = '\0';
        c += len - 1;
    }
    return n;
}

/* "unknown option" with the close ones from the help text. */
static int unknown_option(const char *a, char *err, size_t errlen) {
    char names[128][32], hint[160];
    const char *ptrs[128];
    size_t n = help_options(names, 128);
    for (size_t k = 0; k < n; k++) ptrs[k] = names[k];
    /* Compare the name only: "--gpu-count=8" is judged by "--gpu-count". */
    char q[48];
    ft_strlcpy(q, a, sizeof q);
    char *eq = strchr(q, '=');
    if (eq) *eq = '\0';
    ft_suggest_close(q, ptrs, n, hint, sizeof hint);
    return ft_errorf(err, errlen, "unknown option \"%.40s\"%s%s%s (see ftest --help)", a,
                     hint[0] ? "; did you mean " : "", hint, hint[0] ? "?" : "");
}

static const struct {
    const char *name;
    est_command cmd;
} COMMANDS[] = {
    {"models", EST_CMD_MODELS}, {"gpus", EST_CMD_GPUS},     {"check", EST_CMD_CHECK},
    {"constants", EST_CMD_CONSTANTS}, {"stacks", EST_CMD_STACKS}, {"sweep", EST_CMD_SWEEP}, {"timeline", EST_CMD_TIMELINE},
    {"plan", EST_CMD_PLAN},     {"fit", EST_CMD_FIT},
};

bool est_cli_strategy_given(const est_cli *cli) {
    return cli->zero_set || cli->offload_set || cli->checkpointing_set || cli->ds_config[0] ||
           cli->axolotl[0] || cli->accelerate[0];
}

int est_cli_parse(int argc, char *const argv[], est_cli *cli, char *err, size_t errlen) {
    memset(cli, 0, sizeof *cli);
    cli->epochs = 1;
    int i = 1;
    if (argc > 1 && argv[1] && argv[1][0] != '-') {
        bool found = false;
        for (size_t c = 0; c < sizeof COMMANDS / sizeof COMMANDS[0]; c++)
            if (!strcmp(argv[1], COMMANDS[c].name)) {
                cli->command = COMMANDS[c].cmd;
                found = true;
            }
        if (!found) {
            /* main.c dispatches `calibrate` before this table: suggested too. */
            const char *cmds[sizeof COMMANDS / sizeof COMMANDS[0] + 1];
            char hint[160];
            size_t nc = 0;
            for (size_t c = 0; c < sizeof COMMANDS / sizeof COMMANDS[0]; c++) cmds[nc++] = COMMANDS[c].name;
            cmds[nc++] = "calibrate";
            ft_suggest_close(argv[1], cmds, nc, hint, sizeof hint);
            return ft_errorf(err, errlen, "unknown command \"%.40s\"%s%s%s (see ftest --help)", argv[1],
                             hint[0] ? "; did you mean " : "", hint, hint[0] ? "?" : "");
        }
        i = 2;
    }
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!a) return ft_errorf(err, errlen, "null argument");
        /* --flag=value is the same as --flag value. */
        char name[48];
        const char *val = NULL;
        const char *eq = strchr(a, '=');
        if (a[0] == '-' && a[1] == '-' && eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = '\0';
            val = eq + 1;
        } else if (a[0] == '-' && !ft_strlcpy(name, a, sizeof name)) {
            return unknown_option(a, err, errlen);
        }
#define FLAG(str) (!strcmp(name, str))
#define VALUE() (val ? val : (i + 1 < argc ? argv[++i] : NULL))
#define REQ(v) if (!(v)) return ft_errorf(err, errlen, "%s needs a value", name)
        if (a[0] != '-') {
            if (cli->command != EST_CMD_CHECK && cli->command != EST_CMD_FIT)
                return ft_errorf(err, errlen, "unexpected argument \"%.40s\"", a);
            if (cli->nfiles == EST_MAX_FILES)
                return ft_errorf(err, errlen, "at most %d files", EST_MAX_FILES);
            if (copy_path("file", a, cli->files[cli->nfiles], EST_PATH_MAX, err, errlen)) return -1;
            cli->nfiles++;
        } else if (FLAG("--help") || FLAG("-h")) {
            cli->help = true;
        } else if (FLAG("--version")) {
            cli->version = true;
        } else if (FLAG("--json")) {
            cli->json = true;
        } else if (FLAG("--quiet") || FLAG("-q")) {
            cli->quiet = true;
        } else if (FLAG("--markdown")) {
            cli->markdown = true;
        } else if (FLAG("--no-profile")) {
            cli->no_profile = true;
        } else if (FLAG("--deepspeed-table")) {
            cli->deepspeed_table = true;
        } else if (FLAG("--expandable-segments")) {
            cli->expandable_segments = true;
        } else if (FLAG("--padding-mask")) {
            cli->padding_mask = true;
        } else if (FLAG("--no-zero-init")) {
            cli->no_zero_init = true;
        } else if (FLAG("--stack")) {
            const char *v = VALUE();
            REQ(v);
            const est_stack *st;
            if (est_stack_parse(v, &st, err, errlen)) return -1;
            ft_strlcpy(cli->stack, st->name, sizeof cli->stack);
        } else if (FLAG("--host-ram")) {
            /* 2^30 GiB = 2^60 bytes keeps per-node sums far from int64 overflow. */
            if (parse_real(name, VALUE(), 1.0 / 1024, 1073741824.0, &cli->host_ram_gib, err, errlen)) return -1;
            cli->host_ram_set = true;
        } else if (FLAG("--tight-margin")) {
            const char *v = VALUE();
            REQ(v);
            if (parse_real(name, v, 0, 100, &cli->tight_margin_pct, err, errlen)) return -1;
            if (cli->tight_margin_pct < 0)
                return ft_errorf(err, errlen, "%s must be between 0 and 100 (got %.40s)", name, v);
            cli->tight_margin_set = true;
        } else if (FLAG("--fsdp-version")) {
            const char *v = VALUE();
            REQ(v);
            if (est_fsdp_version_parse(v, &cli->fsdp_version, err, errlen)) return -1;
            cli->fsdp_version_set = true;
        } else if (FLAG("--load-dtype")) {
            const char *v = VALUE();
            REQ(v);
            if (est_load_dtype_parse(v, &cli->load_dtype, err, errlen)) return -1;
            cli->load_dtype_set = true;
        } else if (FLAG("--fsdp-reduce-dtype")) {
            const char *v = VALUE();
            REQ(v);
            if (est_reduce_dtype_parse(v, &cli->fsdp_reduce, err, errlen)) return -1;
            cli->fsdp_reduce_set = true;
        } else if (FLAG("--max-batch")) {
            cli->max_batch = true;
        } else if (FLAG("--max-seq")) {
            cli->max_seq = true;
        } else if (FLAG("--min-gpus")) {
            cli->min_gpus = true;
        } else if (FLAG("--model")) {
            if (copy_path(name, VALUE(), cli->model, sizeof cli->model, err, errlen)) return -1;
        } else if (FLAG("--gpu")) {
            if (copy_path(name, VALUE(), cli->gpu, sizeof cli->gpu, err, errlen)) return -1;
        } else if (FLAG("--accelerate-config")) {
            if (copy_path(name, VALUE(), cli->accelerate, sizeof cli->accelerate, err, errlen)) return -1;
        } else if (FLAG("--axolotl")) {
            if (copy_path(name, VALUE(), cli->axolotl, sizeof cli->axolotl, err, errlen)) return -1;
        } else if (FLAG("--deepspeed-config")) {
            if (copy_path(name, VALUE(), cli->ds_config, sizeof cli->ds_config, err, errlen)) return -1;
        } else if (FLAG("--csv")) {
            if (copy_path(name, VALUE(), cli->csv, sizeof cli->csv, err, errlen)) return -1;
        } else if (FLAG("--svg")) {
            if (copy_path(name, VALUE(), cli->svg, sizeof cli->svg, err, errlen)) return -1;
        } else if (FLAG("--records")) {
            if (copy_path(name, VALUE(), cli->records_file, sizeof cli->records_file, err, errlen)) return -1;
        } else if (FLAG("--catalog")) {
            if (copy_path(name, VALUE(), cli->catalog, sizeof cli->catalog, err, errlen)) return -1;
        } else if (FLAG("--out")) {
            if (copy_path(name, VALUE(), cli->out, sizeof cli->out, err, errlen)) return -1;
        } else if (FLAG("--gpus")) {
            if (est_parse_int(name, VALUE(), 1, EST_MAX_GPUS_PER_NODE, &cli->gpus, err, errlen)) return -1;
            cli->gpus_set = true;
        } else if (FLAG("--nodes")) {
            if (est_parse_int(name, VALUE(), 1, EST_MAX_NODES, &cli->nodes, err, errlen)) return -1;
            cli->nodes_set = true;
        } else if (FLAG("--grad-accum")) {
            if (est_parse_int(name, VALUE(), 1, EST_MAX_ACCUM, &cli->grad_accum, err, errlen)) return -1;
            cli->grad_accum_set = true;
        } else if (FLAG("--layers")) {
            if (est_parse_int(name, VALUE(), 1, FT_MAX_LAYERS, &cli->layers, err, errlen)) return -1;
            cli->layers_set = true;
        } else if (FLAG("--batch") || FLAG("--seq")) {
            /* A range selects a sweep; a single number is the run's value. */
            bool is_seq = FLAG("--seq");
            const char *v = VALUE();
            REQ(v);
            if (strchr(v, ':')) {
                if (cli->command != EST_CMD_SWEEP)
                    return ft_errorf(err, errlen, "%s %.40s: ranges are for `ftest sweep`", name, v);
                if (parse_range(name, v, is_seq ? &cli->sweep_seq : &cli->sweep_batch, err, errlen))
                    return -1;
                *(is_seq ? &cli->sweep_seq_set : &cli->sweep_batch_set) = true;
            } else if (is_seq) {
                if (est_parse_int(name, v, 1, EST_MAX_SEQ, &cli->seq, err, errlen)) return -1;
                cli->seq_set = true;
            } else {
                if (est_parse_int(name, v, 1, EST_MAX_BATCH, &cli->batch, err, errlen)) return -1;
                cli->batch_set = true;
            }
        } else if (FLAG("--zero")) {
            int64_t z;
            if (est_parse_int(name, VALUE(), 0, 3, &z, err, errlen)) return -1;
            cli->zero = (int)z;
            cli->zero_set = true;
        } else if (FLAG("--precision")) {
            const char *v = VALUE();
            REQ(v);
            if (est_precision_parse(v, &cli->precision, err, errlen)) return -1;
            cli->precision_set = true;
        } else if (FLAG("--offload")) {
            const char *v = VALUE();
            REQ(v);
            if (est_offload_parse(v, &cli->offload, err, errlen)) return -1;
            cli->offload_set = true;
        } else if (FLAG("--checkpointing")) {
            const char *v = VALUE();
            REQ(v);
            if (est_checkpointing_parse(v, &cli->checkpointing, err, errlen)) return -1;
            cli->checkpointing_set = true;
        } else if (FLAG("--attention")) {
            const char *v = VALUE();
            REQ(v);
            if (est_attention_parse(v, &cli->attention, err, errlen)) return -1;
            cli->attention_set = true;
        } else if (FLAG("--loss")) {
            const char *v = VALUE();
            REQ(v);
            if (est_loss_parse(v, &cli->loss, err, errlen)) return -1;
            cli->loss_set = true;
        } else if (FLAG("--optimizer")) {
            const char *v = VALUE();
            REQ(v);
            if (est_optimizer_parse(v, &cli->optimizer, err, errlen)) return -1;
            cli->optimizer_set = true;
        } else if (FLAG("--framework")) {
            const char *v = VALUE();
            REQ(v);
            if (est_framework_parse(v, &cli->framework, err, errlen)) return -1;
            cli->framework_set = true;
        } else if (FLAG("--lora-rank")) {
            if (est_parse_int(name, VALUE(), 1, EST_LORA_MAX_RANK, &cli->lora_rank, err, errlen)) return -1;
            cli->lora_rank_set = true;
        } else if (FLAG("--lora-alpha")) {
            if (parse_real(name, VALUE(), 1e-9, 1e9, &cli->lora_alpha, err, errlen)) return -1;
            cli->lora_alpha_set = true;
        } else if (FLAG("--lora-dropout")) {
            if (parse_real(name, VALUE(), 0, 0.999999, &cli->lora_dropout, err, errlen)) return -1;
            cli->lora_dropout_set = true;
        } else if (FLAG("--lora-targets")) {
            if (est_lora_targets_parse(VALUE(), &cli->lora_targets, err, errlen)) return -1;
            cli->lora_targets_set = true;
        } else if (FLAG("--quant")) {
            const char *v = VALUE();
            REQ(v);
            if (est_quant_parse(v, &cli->quant, err, errlen)) return -1;
            cli->quant_set = true;
        } else if (FLAG("--compute-dtype")) {
            const char *v = VALUE();
            REQ(v);
            if (est_compute_dtype_parse(v, &cli->compute_dtype, err, errlen)) return -1;
            cli->compute_dtype_set = true;
        } else if (FLAG("--no-double-quant")) {
            cli->no_double_quant = true;
        } else if (FLAG("--router-aux-loss")) {
            cli->router_aux_loss = true;
        } else if (FLAG("--optimizer-in-backward")) {
            cli->optimizer_in_backward = true;
        } else if (FLAG("--activation-offload")) {
            cli->activation_offload = true;
        } else if (FLAG("--tokens")) {
            if (parse_amount(name, VALUE(), 1e16, &cli->tokens, err, errlen)) return -1;
            cli->tokens_set = true;
        } else if (FLAG("--epochs")) {
            if (parse_amount(name, VALUE(), 1e6, &cli->epochs, err, errlen)) return -1;
        } else if (FLAG("--max-hours")) {
            if (parse_amount(name, VALUE(), 1e7, &cli->max_hours, err, errlen)) return -1;
        } else if (FLAG("--max-cost")) {
            if (parse_amount(name, VALUE(), 1e12, &cli->max_cost, err, errlen)) return -1;
        } else if (FLAG("--global-batch")) {
            const char *v = VALUE();
            REQ(v);
            if (!strcmp(v, "free")) cli->global_batch = 0; /* plan: each plan's largest micro-batch */
            else if (est_parse_int(name, v, 1, 1 << 24, &cli->global_batch, err, errlen)) return -1;
            cli->global_batch_set = true;
        } else if (FLAG("--inter-node-gbps")) {
            /* 1e5 GB/s: far beyond any network; the catalog's bound (instances.c). */
            const char *v = VALUE();
            REQ(v);
            if (parse_real(name, v, 0, 1e5, &cli->inter_node_gb_per_s, err, errlen)) return -1;
            if (!(cli->inter_node_gb_per_s > 0)) /* 0 would read as "not given" */
                return ft_errorf(err, errlen, "%s must be above 0 (got %.40s)", name, v);
        } else {
            return unknown_option(a, err, errlen);
        }
#undef FLAG
#undef VALUE
#undef REQ
    }
    if (cli->command == EST_CMD_SWEEP && cli->sweep_seq_set && cli->sweep_batch_set)
        return ft_errorf(err, errlen, "sweep one variable at a time (--seq or --batch range)");
    if ((cli->command == EST_CMD_CHECK || cli->command == EST_CMD_FIT) && cli->nfiles == 0 &&
        !cli->help)
        return ft_errorf(err, errlen, "%s needs at least one records file",
                         cli->command == EST_CMD_CHECK ? "check" : "fit");
    /* Pairs that cannot both be honoured are refused by name, never half-done. */
    if (cli->json && cli->deepspeed_table)
        return ft_errorf(err, errlen, "--deepspeed-table prints DeepSpeed's text tables and does not "
                                      "combine with --json (the JSON report carries DeepSpeed's "
                                      "figure as \"deepspeed_estimator\")");
    int inverse = cli->max_batch + cli->max_seq + cli->min_gpus;
    if (inverse > 1)
        return ft_errorf(err, errlen, "ask one of --max-batch, --max-seq, --min-gpus at a time");
    return 0;
}
