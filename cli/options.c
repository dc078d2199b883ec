#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp_policy.h"
#include "kernels.h"
#include "json_util.h"
#include "liger.h"
#include "lora.h"
#include "peft.h"
#include "peft_vec.h"
#include "fp8.h"
#include "objective.h"
#include "optimizers.h"
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
    "  --checkpointing C   none | selective | full | selective-op\n"
    "  --attention A       eager | sdpa | flash (default sdpa; ftrain: flash)\n"
    "  --loss L            standard | chunked (fused linear cross-entropy) | cce (Cut\n"
    "                      Cross-Entropy) | chunked-output (torchtune's 8 logit chunks)\n"
    "  --optimizer O       adamw | adamw-8bit | paged-adamw-8bit | paged-adamw-32bit |\n"
    "                      adafactor | adafactor-beta1 | lion | sgd | sgd-momentum |\n"
    "                      adamw-4bit (torchao)\n"
    "                      (default adamw; all but adamw and sgd: --framework hf only)\n"
    "  --adamw-impl I      foreach | fused: torch AdamW's implementation (default the\n"
    "                      stack's: the HF Trainer's optim is adamw_torch_fused from\n"
    "                      transformers 4.54 with torch 2.8; under deepspeed the client\n"
    "                      optimizer's, under fsdp the shards'; not ftrain)\n"
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
    "  --torchtune FILE    take model, LoRA/QLoRA, batch, dtype, checkpointing, offloading,\n"
    "                      optimizer, loss and FSDP2 settings from a torchtune (0.6.1)\n"
    "                      recipe config (flags given as well win)\n"
    "  --torchtune-recipe R  the recipe the config runs under: full_finetune_distributed,\n"
    "                      lora_finetune_distributed, full_finetune_single_device or\n"
    "                      lora_finetune_single_device (default: from the file name, as\n"
    "                      torchtune's recipe registry pairs them)\n"
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
    "  --fsdp-backward-prefetch P  fsdp 1: none (the HF Trainer's default) | pre | post\n"
    "  --fsdp-lora-wrap W     fsdp + LoRA: peft (each adapter its own unit, the HF Trainer's)\n"
    "                         | layer (adapters in their decoder layer's unit, torchtune's)\n"
    "  --fsdp-forward-prefetch  fsdp 1: gather the next unit during this one's forward\n"
    "  --fsdp-shard-ends        fsdp 2: the embedding and the LM head as units of their own\n"
    "  --fsdp-wrapper W    fsdp: accelerate | torch: who wraps the model (default accelerate,\n"
    "                      prepare_model under the HF Trainer; torch: the script itself)\n"
    "  --router-aux-loss   MoE: output_router_logits=True (the load-balancing loss)\n"
    "  --non-reentrant     --checkpointing full through torch.utils.checkpoint(use_reentrant=\n"
    "                      False): the recompute keeps only what backward unpacks\n"
    "  --packing           packed rows (several samples per row, flash varlen attention)\n"
    "  --packed-sample-len N  packed samples' sum(len^2)/sum(len) (attention FLOPs; default\n"
    "                      --seq, one sample per row)\n"
    "  --rl R              dpo | orpo | kto: TRL's preference trainers (paired rows, the\n"
    "                      reference model's forward)\n"
    "  --precomputed-ref   dpo, kto: reference log-probs computed before training\n"
    "  --ckpt-every N      checkpoint every N-th block only (torchtitan selective_ac_option N)\n"
    "  --tp N              tensor parallelism over N GPUs of a node (torchtitan, FSDP2; dp = world / N)\n"
    "  --cp N              context parallelism (refused beyond 1: not modelled)\n"
    "  --compile           torch.compile (inductor) of the model: fused elementwise chains\n"
    "\n"
    "LoRA (PEFT on the HF Trainer; the base is frozen in the compute dtype):\n"
    "  --lora-rank R       train rank-R adapters only (default: full fine-tuning)\n"
    "  --lora-alpha A      lora_alpha (default 8; scaling only, no memory effect)\n"
    "  --lora-targets T    comma list of q,k,v,o,gate,up,down, or all-linear\n"
    "                      (default q,v: PEFT's default for Llama, Mistral, Qwen2)\n"
    "  --lora-dropout P    dropout on the adapter input, 0 <= P < 1 (default 0)\n"
    "  --lora-dtype D      fp32 (PEFT's default) | bf16: adapters kept in the base's bf16\n"
    "                      (autocast_adapter_dtype=False, torchtune; --precision bf16, fsdp)\n"
    "  --quant Q           none | nf4 | int8: QLoRA's quantized frozen base (bitsandbytes;\n"
    "                      needs --lora-rank and bf16-mixed or fp16-mixed, or bf16 with\n"
    "                      --lora-dtype bf16 under fsdp)\n"
    "  --compute-dtype D   auto | bf16 | fp16 | fp32: bnb_4bit_compute_dtype (auto: the\n"
    "                      precision's compute dtype)\n"
    "  --no-double-quant   nf4 without double quantization of the block constants\n"
    "  --modules-to-save M embed_tokens,lm_head: trainable copies beside the frozen ones\n"
    "  --liger K           Liger-Kernel's kernels: all (apply_liger_kernel_to_<model>'s\n"
    "                      defaults) or rope,rms_norm,swiglu,geglu,layer_norm,cross_entropy,\n"
    "                      fused_linear_cross_entropy (= --loss chunked)\n"
    "  --fp8 R             tensorwise | rowwise | rowwise-gw-hp: block Linears as torchao\n"
    "                      Float8Linear (full fine-tune, bf16, hf or fsdp; Ada/Hopper/Blackwell)\n"
    "  --fsdp-float8-all-gather  FSDP2 gathers those weights in fp8 (--fp8 tensorwise)\n"
    "  --trainable P[,P]   train only the parameters whose Hugging Face names match one\n"
    "                      of the POSIX regexes P (the rest frozen, adapters included)\n"
    "\n"
    "PEFT methods and the training loop (--framework hf):\n"
    "  --peft M            lora | ia3 | prompt-tuning | prefix-tuning | p-tuning |\n"
    "                      adaption-prompt | adalora | vera | pvera | tinylora | miss |\n"
    "                      ln-tuning | trainable-tokens | loha | lokr | oft | fourierft |\n"
    "                      waveft (default lora, with --lora-rank)\n"
    "  --lora-variant V    lora | rslora | dora | lora-fa (PEFT's use_rslora, use_dora,\n"
    "                      create_lorafa_optimizer)\n"
    "  --lora-fa-a-grad    LoRA-FA's lora_A requires grad again (the script ran the model\n"
    "                      under PeftModel.disable_adapter() after create_lorafa_optimizer)\n"
    "  --ia3-targets T     IA3's target_modules (default PEFT's: k,v,down for Llama)\n"
    "  --ia3-feedforward T IA3's feedforward_modules, among the targets (default down)\n"
    "  --virtual-tokens N  num_virtual_tokens: prompt tuning's and P-tuning's, put before\n"
    "                      every sequence; prefix tuning's, keys and values in every layer\n"
    "  --encoder-hidden H  P-tuning's MLP encoder_hidden_size\n"
    "  --adapter-len A     adaption prompt's adapter_len (every layer adapted)\n"
    "  --peft-rank N       r of --peft adalora (its init_r), vera, pvera, tinylora, miss,\n"
    "                      loha, lokr or oft (OFT's blocks are in_features / r)\n"
    "  --peft-targets T    their target_modules, and fourierft's and waveft's (default\n"
    "                      q,v, PEFT's for Llama)\n"
    "  --peft-alpha A      LoHa's and LoKr's alpha (changes no byte)\n"
    "  --lokr-factor F     LoKr's decompose_factor (default -1)\n"
    "  --n-frequency N     FourierFT's and WaveFT's n_frequency (default 1000 and 2592)\n"
    "  --miss-init I       MiSS's init_weights: default | bat | mini\n"
    "  --miss-mini-r N     MiSS mini's block width (mini_r)\n"
    "  --trainable-tokens N  --peft trainable-tokens: how many token_indices are trained\n"
    "  --tinylora-u N      TinyLoRA's trained vector length u (default 64)\n"
    "  --tinylora-weight-tying F  TinyLoRA's weight_tying, 0 (a vector per target) to 1 (one)\n"
    "  --train-loop L      trainer | plain: a hand-written loop (zero_grad first, the\n"
    "                      model's outputs kept until the next forward returns)\n"
    "  --empty-cache-steps N  a plain loop calls torch.cuda.empty_cache() every N steps\n"
    "  --no-kv-cache       the model's use_cache is False (no KV cache in training)\n"
    "\n"
    "sequences of many lengths (dynamic padding: each batch padded to its longest):\n"
    "  --seq-lengths FILE  sample lengths in tokens, one per line or LENGTH COUNT; the\n"
    "                      longest batch sets the peak, the mean padded one the time\n"
    "                      (--seq truncates them; default: the longest)\n"
    "  --batching B        random | sorted (by length, as group_by_length; default random)\n"
    "  --seq-mean L        the mean padded tokens per sequence instead of a file (--seq\n"
    "                      is then the longest batch's)\n"
    "\n"
    "single-device recipes (--framework hf, one GPU):\n"
    "  --optimizer-in-backward  step each parameter in its gradient hook and free the\n"
    "                      gradient (no gradient buffers, no clipping, --grad-accum 1)\n"
    "  --activation-offload  move saved activations to pinned host memory\n"
    "                      (torch.autograd.graph.save_on_cpu)\n"
    "\n"
    "fused kernels (custom autograd Functions in place of the modeling code):\n"
    "  --kernels K         comma list: lora-qkv, lora-o, lora-mlp (axolotl's LoRA\n"
    "                      kernels), fused-mlp (xformers' packed SwiGLU, Llama full\n"
    "                      fine-tuning); none (default)\n"
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
    "names of models, GPUs and Hugging Face cache entries ignore case; whole numbers\n"
    "(--gpus, --seq, --batch, ...) take no size suffix (--seq 2048, not 2k)\n"
    "\n"
    "exit status: 0 fits / check passed, 1 does not fit / check failed, 2 bad input\n"
    "or output that could not be written (docs/reliability.md).\n";

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
    char *parts[3];
    const int n = est_split_range(opt, s, buf, parts, err, errlen);
    if (n < 0) return -1;
    int64_t v[3] = {0, 0, 1};
    static const char *const part_names[3] = {"START", "STOP", "STEP"};
    for (int i = 0; i < n; i++) {
        char what[64]; /* the part is named: "--seq STEP must be ..." */
        snprintf(what, sizeof what, "%s %s", opt, part_names[i]);
        if (est_parse_int(what, parts[i], 1, (int64_t)1 << 24, &v[i], err, errlen) < 0) return -1;
    }
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
           cli->axolotl[0] || cli->accelerate[0] || cli->torchtune[0];
}

/* ---- The option table -------------------------------------------------------------
 * Each option names its kind and where its value goes in est_cli; the kinds with a
 * shared parser (paths, whole numbers, real numbers, amounts) need no code of their
 * own, the others name a handler. An option given with no value (the last argument,
 * or a null one) is refused by name before any parser runs. */

typedef enum {
    OPT_SWITCH, /* no value: sets the bool at field (a "=value" is ignored) */
    OPT_PATH,   /* copy_path into the char array at field, of size bytes */
    OPT_INT,    /* est_parse_int within imin..imax into the int64_t at field */
    OPT_REAL,   /* parse_real within min..max into the double at field */
    OPT_AMOUNT, /* parse_amount up to max into the double at field */
    OPT_CUSTOM, /* handler parses and stores */
} opt_kind;

/* name is the option as given (without "=value"); v is its value, never NULL. */
typedef int (*opt_handler)(est_cli *cli, const char *name, const char *v, char *err,
                           size_t errlen);

typedef struct {
    const char *name;
    opt_kind kind;
    size_t field;        /* offsetof the value in est_cli (not OPT_CUSTOM) */
    size_t size;         /* OPT_PATH: the buffer's size */
    size_t given;        /* offsetof the bool set once the value is parsed; 0: none */
    int64_t imin, imax;  /* OPT_INT */
    double min, max;     /* OPT_REAL; OPT_AMOUNT uses max */
    opt_handler handler; /* OPT_CUSTOM */
} est_option;

/* Offset 0 is est_cli.command, never a flag: "given = 0" can mean "none". */
_Static_assert(offsetof(est_cli, command) == 0, "est_cli.command must come first");

static int set_stack(est_cli *cli, const char *name, const char *v, char *err, size_t errlen) {
    (void)name;
    const est_stack *st;
    if (est_stack_parse(v, &st, err, errlen)) return -1;
    ft_strlcpy(cli->stack, st->name, sizeof cli->stack);
    return 0;
}

static int set_tight_margin(est_cli *cli, const char *name, const char *v, char *err,
                            size_t errlen) {
    if (parse_real(name, v, 0, 100, &cli->tight_margin_pct, err, errlen)) return -1;
    if (cli->tight_margin_pct < 0)
        return ft_errorf(err, errlen, "%s must be between 0 and 100 (got %.40s)", name, v);
    return 0;
}

/* --batch and --seq: a range selects a sweep; a single number is the run's value. */
static int set_batch_or_seq(est_cli *cli, const char *name, const char *v, char *err,
                            size_t errlen) {
    bool is_seq = !strcmp(name, "--seq");
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
    return 0;
}

static int set_zero(est_cli *cli, const char *name, const char *v, char *err, size_t errlen) {
    int64_t z;
    if (est_parse_int(name, v, 0, 3, &z, err, errlen)) return -1;
    cli->zero = (int)z;
    return 0;
}

static int set_global_batch(est_cli *cli, const char *name, const char *v, char *err,
                            size_t errlen) {
    if (!strcmp(v, "free")) cli->global_batch = 0; /* plan: each plan's largest micro-batch */
    else if (est_parse_int(name, v, 1, 1 << 24, &cli->global_batch, err, errlen)) return -1;
    return 0;
}

static int set_inter_node_gbps(est_cli *cli, const char *name, const char *v, char *err,
                               size_t errlen) {
    /* 1e5 GB/s: far beyond any network; the catalog's bound (instances.c). */
    if (parse_real(name, v, 0, 1e5, &cli->inter_node_gb_per_s, err, errlen)) return -1;
    if (!(cli->inter_node_gb_per_s > 0)) /* 0 would read as "not given" */
        return ft_errorf(err, errlen, "%s must be above 0 (got %.40s)", name, v);
    return 0;
}

/* --ia3-targets and --ia3-feedforward name Linears as --lora-targets does;
 * the message names the option given. */
static int set_ia3_list(est_cli *cli, const char *name, const char *v, char *err, size_t errlen) {
    char e[200];
    uint32_t *dst = !strcmp(name, "--ia3-targets") ? &cli->ia3_targets : &cli->ia3_feedforward;
    if (est_lora_targets_parse(v, dst, e, sizeof e) == 0) return 0;
    const char *rest = !strncmp(e, "--lora-targets", 14) ? e + 14 : e;
    return ft_errorf(err, errlen, "%s%s", name, rest);
}

/* --peft-targets: the target_modules of PEFT's methods other than LoRA and
 * IA3, named as --lora-targets names them. */
static int set_peft_targets(est_cli *cli, const char *name, const char *v, char *err, size_t errlen) {
    char e[200];
    if (est_lora_targets_parse(v, &cli->peft_targets, e, sizeof e) == 0) return 0;
    const char *rest = !strncmp(e, "--lora-targets", 14) ? e + 14 : e;
    return ft_errorf(err, errlen, "%s%s", name, rest);
}

/* The named choices: each parser (run.c, lora.c, quant.c, fsdp_policy.c) words its
 * own errors and names its option itself. */
#define CHOICE_HANDLER(fn, parse, field)                                                   \
    static int fn(est_cli *cli, const char *name, const char *v, char *err, size_t errlen) { \
        (void)name;                                                                        \
        return parse(v, &cli->field, err, errlen);                                         \
    }
CHOICE_HANDLER(set_precision, est_precision_parse, precision)
CHOICE_HANDLER(set_offload, est_offload_parse, offload)
CHOICE_HANDLER(set_checkpointing, est_checkpointing_parse, checkpointing)
CHOICE_HANDLER(set_attention, est_attention_parse, attention)
CHOICE_HANDLER(set_loss, est_loss_parse, loss)
CHOICE_HANDLER(set_optimizer, est_optimizer_parse, optimizer)
CHOICE_HANDLER(set_adamw_impl, est_adamw_impl_parse, adamw_impl)
CHOICE_HANDLER(set_framework, est_framework_parse, framework)
CHOICE_HANDLER(set_fsdp_version, est_fsdp_version_parse, fsdp_version)
CHOICE_HANDLER(set_load_dtype, est_load_dtype_parse, load_dtype)
CHOICE_HANDLER(set_fsdp_reduce, est_reduce_dtype_parse, fsdp_reduce)
CHOICE_HANDLER(set_fsdp_prefetch, est_fsdp_prefetch_parse, fsdp_prefetch)
CHOICE_HANDLER(set_fsdp_lora_wrap, est_fsdp_lora_wrap_parse, fsdp_lora_wrap)
CHOICE_HANDLER(set_fsdp_wrapper, est_fsdp_wrapper_parse, fsdp_wrapper)
CHOICE_HANDLER(set_lora_dtype, est_lora_dtype_parse, lora_base_dtype)
CHOICE_HANDLER(set_lora_targets, est_lora_targets_parse, lora_targets)
CHOICE_HANDLER(set_quant, est_quant_parse, quant)
CHOICE_HANDLER(set_compute_dtype, est_compute_dtype_parse, compute_dtype)
CHOICE_HANDLER(set_peft, est_peft_parse, peft)
CHOICE_HANDLER(set_lora_variant, est_lora_variant_parse, lora_variant)
CHOICE_HANDLER(set_miss_init, est_miss_init_parse, miss_init)
CHOICE_HANDLER(set_train_loop, est_train_loop_parse, train_loop)
CHOICE_HANDLER(set_batching, est_batching_parse, batching)
CHOICE_HANDLER(set_rl, est_rl_parse, rl)
CHOICE_HANDLER(set_fp8, est_fp8_parse, fp8)
CHOICE_HANDLER(set_modules_to_save, est_save_parse, modules_to_save)
CHOICE_HANDLER(set_kernels, est_kernels_parse, kernels)
#undef CHOICE_HANDLER

static int set_liger(est_cli *cli, const char *name, const char *v, char *err, size_t errlen) {
    (void)name;
    return est_liger_parse(v, &cli->liger, &cli->liger_all, err, errlen);
}

/* --trainable: a comma list of regexes (a comma inside [] or {} is the
 * regex's), appended to those of earlier --trainable flags. */
static int set_trainable(est_cli *cli, const char *name, const char *v, char *err, size_t errlen) {
    est_trainable *t = &cli->trainable;
    const char *start = v;
    int depth = 0;
    for (const char *c = v;; c++) {
        if (*c == '[' || *c == '{') depth++;
        if ((*c == ']' || *c == '}') && depth > 0) depth--;
        if (*c && (*c != ',' || depth > 0)) continue;
        const size_t len = (size_t)(c - start);
        if (len == 0) return ft_errorf(err, errlen, "%s: an empty pattern", name);
        if (t->n == EST_TRAINABLE_MAX)
            return ft_errorf(err, errlen, "%s: at most %d patterns", name, EST_TRAINABLE_MAX);
        if (len >= EST_TRAINABLE_LEN)
            return ft_errorf(err, errlen, "%s: a pattern longer than %d characters", name, EST_TRAINABLE_LEN - 1);
        memcpy(t->pattern[t->n], start, len);
        t->pattern[t->n++][len] = '\0';
        if (!*c) return 0;
        start = c + 1;
    }
}

#define AT(f) offsetof(est_cli, f)
#define SWITCH(n, f) {.name = n, .kind = OPT_SWITCH, .field = AT(f)}
#define PATH(n, f) {.name = n, .kind = OPT_PATH, .field = AT(f), .size = sizeof(((est_cli *)0)->f)}
#define INT(n, f, lo, hi) \
    {.name = n, .kind = OPT_INT, .field = AT(f), .given = AT(f##_set), .imin = lo, .imax = hi}
#define REAL(n, f, g, lo, hi) \
    {.name = n, .kind = OPT_REAL, .field = AT(f), .given = g, .min = lo, .max = hi}
#define AMOUNT(n, f, g, hi) {.name = n, .kind = OPT_AMOUNT, .field = AT(f), .given = g, .max = hi}
#define CUSTOM(n, h, g) {.name = n, .kind = OPT_CUSTOM, .handler = h, .given = g}

/* Every option; the help text (est_usage) describes them and feeds the suggestions. */
static const est_option OPTIONS[] = {
    SWITCH("--help", help),
    SWITCH("-h", help),
    SWITCH("--version", version),
    SWITCH("--json", json),
    SWITCH("--quiet", quiet),
    SWITCH("-q", quiet),
    SWITCH("--markdown", markdown),
    SWITCH("--no-profile", no_profile),
    SWITCH("--deepspeed-table", deepspeed_table),
    SWITCH("--expandable-segments", expandable_segments),
    SWITCH("--padding-mask", padding_mask),
    SWITCH("--no-zero-init", no_zero_init),
    SWITCH("--max-batch", max_batch),
    SWITCH("--max-seq", max_seq),
    SWITCH("--min-gpus", min_gpus),
    SWITCH("--no-double-quant", no_double_quant),
    SWITCH("--router-aux-loss", router_aux_loss),
    SWITCH("--optimizer-in-backward", optimizer_in_backward),
    SWITCH("--activation-offload", activation_offload),
    SWITCH("--fsdp-forward-prefetch", fsdp_forward_prefetch),
    SWITCH("--fsdp-shard-ends", fsdp_shard_ends),
    SWITCH("--no-kv-cache", no_kv_cache),
    SWITCH("--non-reentrant", non_reentrant),
    SWITCH("--packing", packing),
    SWITCH("--precomputed-ref", precomputed_ref),
    SWITCH("--compile", compile),

    CUSTOM("--stack", set_stack, 0),
    /* 2^30 GiB = 2^60 bytes keeps per-node sums far from int64 overflow. */
    REAL("--host-ram", host_ram_gib, AT(host_ram_set), 1.0 / 1024, 1073741824.0),
    CUSTOM("--tight-margin", set_tight_margin, AT(tight_margin_set)),
    CUSTOM("--fsdp-version", set_fsdp_version, AT(fsdp_version_set)),
    CUSTOM("--load-dtype", set_load_dtype, AT(load_dtype_set)),
    CUSTOM("--fsdp-reduce-dtype", set_fsdp_reduce, AT(fsdp_reduce_set)),
    CUSTOM("--fsdp-backward-prefetch", set_fsdp_prefetch, AT(fsdp_prefetch_set)),
    CUSTOM("--fsdp-lora-wrap", set_fsdp_lora_wrap, AT(fsdp_lora_wrap_set)),
    CUSTOM("--fsdp-wrapper", set_fsdp_wrapper, AT(fsdp_wrapper_set)),

    PATH("--model", model),
    PATH("--gpu", gpu),
    PATH("--accelerate-config", accelerate),
    PATH("--torchtune", torchtune),
    PATH("--torchtune-recipe", torchtune_recipe),
    PATH("--axolotl", axolotl),
    PATH("--deepspeed-config", ds_config),
    PATH("--csv", csv),
    PATH("--svg", svg),
    PATH("--records", records_file),
    PATH("--catalog", catalog),
    PATH("--out", out),

    INT("--gpus", gpus, 1, EST_MAX_GPUS_PER_NODE),
    INT("--nodes", nodes, 1, EST_MAX_NODES),
    INT("--grad-accum", grad_accum, 1, EST_MAX_ACCUM),
    INT("--layers", layers, 1, FT_MAX_LAYERS),
    CUSTOM("--batch", set_batch_or_seq, 0),
    CUSTOM("--seq", set_batch_or_seq, 0),
    CUSTOM("--zero", set_zero, AT(zero_set)),
    CUSTOM("--precision", set_precision, AT(precision_set)),
    CUSTOM("--offload", set_offload, AT(offload_set)),
    CUSTOM("--checkpointing", set_checkpointing, AT(checkpointing_set)),
    CUSTOM("--attention", set_attention, AT(attention_set)),
    CUSTOM("--loss", set_loss, AT(loss_set)),
    CUSTOM("--optimizer", set_optimizer, AT(optimizer_set)),
    CUSTOM("--adamw-impl", set_adamw_impl, 0),
    CUSTOM("--framework", set_framework, AT(framework_set)),

    INT("--lora-rank", lora_rank, 1, EST_LORA_MAX_RANK),
    CUSTOM("--lora-dtype", set_lora_dtype, AT(lora_dtype_set)),
    REAL("--lora-alpha", lora_alpha, AT(lora_alpha_set), 1e-9, 1e9),
    REAL("--lora-dropout", lora_dropout, AT(lora_dropout_set), 0, 0.999999),
    CUSTOM("--lora-targets", set_lora_targets, AT(lora_targets_set)),
    CUSTOM("--quant", set_quant, AT(quant_set)),
    CUSTOM("--compute-dtype", set_compute_dtype, AT(compute_dtype_set)),
    CUSTOM("--peft", set_peft, AT(peft_set)),
    CUSTOM("--lora-variant", set_lora_variant, AT(lora_variant_set)),
    SWITCH("--lora-fa-a-grad", lora_fa_a_grad),
    CUSTOM("--ia3-targets", set_ia3_list, AT(ia3_targets_set)),
    CUSTOM("--ia3-feedforward", set_ia3_list, AT(ia3_feedforward_set)),
    CUSTOM("--kernels", set_kernels, AT(kernels_set)),
    INT("--virtual-tokens", virtual_tokens, 1, EST_LORA_MAX_RANK),
    INT("--encoder-hidden", encoder_hidden, 1, 1 << 20),
    INT("--adapter-len", adapter_len, 1, EST_LORA_MAX_RANK),
    INT("--peft-rank", peft_rank, 1, EST_LORA_MAX_RANK),
    CUSTOM("--peft-targets", set_peft_targets, AT(peft_targets_set)),
    CUSTOM("--miss-init", set_miss_init, AT(miss_init_set)),
    INT("--miss-mini-r", miss_mini_r, 1, EST_LORA_MAX_RANK),
    INT("--trainable-tokens", trainable_tokens, 1, INT32_MAX),
    INT("--tinylora-u", tinylora_u, 1, EST_LORA_MAX_RANK),
    REAL("--tinylora-weight-tying", tinylora_tying, AT(tinylora_tying_set), 0, 1),
    REAL("--peft-alpha", peft_alpha, AT(peft_alpha_set), -1e9, 1e9),
    INT("--lokr-factor", lokr_factor, -1, INT32_MAX),
    INT("--n-frequency", n_frequency, 1, INT32_MAX),
    CUSTOM("--train-loop", set_train_loop, AT(train_loop_set)),
    INT("--empty-cache-steps", empty_cache_steps, 1, INT32_MAX),
    PATH("--seq-lengths", seq_lengths),
    CUSTOM("--batching", set_batching, AT(batching_set)),
    REAL("--seq-mean", seq_mean, AT(seq_mean_set), 1, (double)EST_MAX_SEQ),
    CUSTOM("--modules-to-save", set_modules_to_save, AT(modules_to_save_set)),
    CUSTOM("--rl", set_rl, AT(rl_set)),
    CUSTOM("--liger", set_liger, AT(liger_set)),
    CUSTOM("--fp8", set_fp8, AT(fp8_set)),
    SWITCH("--fsdp-float8-all-gather", fp8_all_gather),
    INT("--packed-sample-len", packed_sample_len, 1, EST_MAX_SEQ),
    INT("--ckpt-every", ckpt_every, 1, FT_MAX_LAYERS),
    INT("--tp", tp, 1, EST_MAX_GPUS_PER_NODE),
    INT("--cp", cp, 1, EST_MAX_GPUS_PER_NODE),
    CUSTOM("--trainable", set_trainable, AT(trainable_set)),

    AMOUNT("--tokens", tokens, AT(tokens_set), 1e16),
    AMOUNT("--epochs", epochs, 0, 1e6),
    AMOUNT("--max-hours", max_hours, 0, 1e7),
    AMOUNT("--max-cost", max_cost, 0, 1e12),
    CUSTOM("--global-batch", set_global_batch, AT(global_batch_set)),
    CUSTOM("--inter-node-gbps", set_inter_node_gbps, 0),
};

#undef AT
#undef SWITCH
#undef PATH
#undef INT
#undef REAL
#undef AMOUNT
#undef CUSTOM

static const est_option *find_option(const char *name) {
    for (size_t k = 0; k < sizeof OPTIONS / sizeof OPTIONS[0]; k++)
        if (!strcmp(OPTIONS[k].name, name)) return &OPTIONS[k];
    return NULL;
}

/* Parses v into the field o names, then marks it given. */
static int apply_option(const est_option *o, const char *name, const char *v, est_cli *cli,
                        char *err, size_t errlen) {
    char *base = (char *)cli;
    int rc;
    switch (o->kind) {
    case OPT_PATH: rc = copy_path(name, v, base + o->field, o->size, err, errlen); break;
    case OPT_INT:
        rc = est_parse_int(name, v, o->imin, o->imax, (int64_t *)(base + o->field), err, errlen);
        break;
    case OPT_REAL:
        rc = parse_real(name, v, o->min, o->max, (double *)(base + o->field), err, errlen);
        break;
    case OPT_AMOUNT: rc = parse_amount(name, v, o->max, (double *)(base + o->field), err, errlen); break;
    default: rc = o->handler(cli, name, v, err, errlen); break;
    }
    if (rc) return -1;
    if (o->given) *(bool *)(base + o->given) = true;
    return 0;
}

/* The command word, if argv[1] is one: the index of the first option (1 or 2), or -1. */
static int parse_command(int argc, char *const argv[], est_cli *cli, char *err, size_t errlen) {
    if (argc <= 1 || !argv[1] || argv[1][0] == '-') return 1;
    for (size_t c = 0; c < sizeof COMMANDS / sizeof COMMANDS[0]; c++)
        if (!strcmp(argv[1], COMMANDS[c].name)) {
            cli->command = COMMANDS[c].cmd;
            return 2;
        }
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

/* check and fit take record files as plain arguments. */
static int add_file(const char *a, est_cli *cli, char *err, size_t errlen) {
    if (cli->command != EST_CMD_CHECK && cli->command != EST_CMD_FIT)
        return ft_errorf(err, errlen, "unexpected argument \"%.40s\"", a);
    if (cli->nfiles == EST_MAX_FILES)
        return ft_errorf(err, errlen, "at most %d files", EST_MAX_FILES);
    if (copy_path("file", a, cli->files[cli->nfiles], EST_PATH_MAX, err, errlen)) return -1;
    cli->nfiles++;
    return 0;
}

/* "--flag=value" is the same as "--flag value": the name into name[48], the value (or
 * NULL) into *val. -1 when the name does not fit. */
static int split_option(const char *a, char name[48], const char **val) {
    const char *eq = strchr(a, '=');
    *val = NULL;
    if (a[1] == '-' && eq && (size_t)(eq - a) < 48) {
        memcpy(name, a, (size_t)(eq - a));
        name[eq - a] = '\0';
        *val = eq + 1;
        return 0;
    }
    return ft_strlcpy(name, a, 48) ? 0 : -1;
}

/* One option at argv[*i]; its value, when it takes one and none follows "=", is
 * argv[*i + 1], and *i moves past it. */
static int parse_option(int argc, char *const argv[], int *i, est_cli *cli, char *err,
                        size_t errlen) {
    const char *a = argv[*i], *val;
    char name[48];
    if (split_option(a, name, &val)) return unknown_option(a, err, errlen);
    const est_option *o = find_option(name);
    if (!o) return unknown_option(a, err, errlen);
    if (o->kind == OPT_SWITCH) {
        *(bool *)((char *)cli + o->field) = true;
        return 0;
    }
    const char *v = val ? val : (*i + 1 < argc ? argv[++*i] : NULL);
    if (!v) return ft_errorf(err, errlen, "%s needs a value", name);
    return apply_option(o, name, v, cli, err, errlen);
}

/* Pairs that cannot both be honoured are refused by name, never half-done. */
static int check_combinations(const est_cli *cli, char *err, size_t errlen) {
    if (cli->command == EST_CMD_SWEEP && cli->sweep_seq_set && cli->sweep_batch_set)
        return ft_errorf(err, errlen, "sweep one variable at a time (--seq or --batch range)");
    if ((cli->command == EST_CMD_CHECK || cli->command == EST_CMD_FIT) && cli->nfiles == 0 &&
        !cli->help)
        return ft_errorf(err, errlen, "%s needs at least one records file",
                         cli->command == EST_CMD_CHECK ? "check" : "fit");
    if (cli->json && cli->deepspeed_table)
        return ft_errorf(err, errlen, "--deepspeed-table prints DeepSpeed's text tables and does not "
                                      "combine with --json (the JSON report carries DeepSpeed's "
                                      "figure as \"deepspeed_estimator\")");
    int inverse = cli->max_batch + cli->max_seq + cli->min_gpus;
    if (inverse > 1)
        return ft_errorf(err, errlen, "ask one of --max-batch, --max-seq, --min-gpus at a time");
    return 0;
}

int est_cli_parse(int argc, char *const argv[], est_cli *cli, char *err, size_t errlen) {
    memset(cli, 0, sizeof *cli);
    cli->epochs = 1;
    int i = parse_command(argc, argv, cli, err, errlen);
    if (i < 0) return -1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!a) return ft_errorf(err, errlen, "null argument");
        int rc = a[0] == '-' ? parse_option(argc, argv, &i, cli, err, errlen)
                             : add_file(a, cli, err, errlen);
        if (rc) return -1;
    }
    return check_combinations(cli, err, errlen);
}
