#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"

void tr_cli_usage(FILE *out) {
    fputs(
        "usage: ftrain [options]\n"
        "\n"
        "Trains a Llama-architecture decoder on the CPU with exact memory accounting\n"
        "and appends a measurement record (docs/trainer.md, docs/records.md).\n"
        "\n"
        "model and data\n"
        "  --model NAME|PATH      shipped model (models/NAME.json) or a HF config.json [tiny-llama]\n"
        "  --layers K             train only the first K blocks, exact shapes [all]\n"
        "  --data synthetic|FILE  seeded next-token task, or a token file (FTRAINTK format) [synthetic]\n"
        "  --init seeded|FILE     seeded initializer, or a .safetensors file with HF names [seeded]\n"
        "  --seed N               seed of the initializer and the synthetic task [1337]\n"
        "\n"
        "batch\n"
        "  --seq T                tokens per sequence, at most the model's maximum [32]\n"
        "  --batch B              sequences per rank per micro-batch [2]\n"
        "  --grad-accum A         micro-batches per optimizer step [1]\n"
        "  --global-batch G       sequences per optimizer step over all ranks; sets --grad-accum\n"
        "                         to G / (ranks * batch), which must divide evenly\n"
        "  --steps S              optimizer steps [10]\n"
        "\n"
        "parallelism and memory\n"
        "  --ranks N              ranks, run as threads with an in-process communicator (1..64) [1]\n"
        "  --zero 0|1|2|3         ZeRO stage: shard optimizer state (1), grads (2), weights (3) [0]\n"
        "  --offload none|optimizer|optimizer+params\n"
        "                         keep optimizer state (and weights, with --zero 3) in host memory [none]\n"
        "  --checkpointing none|selective|full\n"
        "                         recompute the attention core (selective) or whole blocks (full) [none]\n"
        "  --attention eager|flash  materialized scores, or tiled online softmax [flash]\n"
        "  --loss standard|chunked  full logits, or 32 rows of logits at a time [standard]\n"
        "  --precision fp32|bf16-mixed  bf16 weights/grads/activations with fp32 master [fp32]\n"
        "\n"
        "optimizer\n"
        "  --optimizer adamw|sgd  [adamw]\n"
        "  --lr X                 peak learning rate [1e-3]\n"
        "  --warmup N             linear warmup steps, then cosine decay to lr/10 [0]\n"
        "  --weight-decay X       decoupled weight decay on 2-D weights [0]\n"
        "  --clip X               clip the global gradient norm to X, 0 = off [1]\n"
        "\n"
        "output\n"
        "  --record FILE          append ftest.record/1 lines for this run: one per window,\n"
        "                         then a final one (\"final\": true)\n"
        "  --record-window S      seconds of training per window record, 0 = every step [60]\n"
        "  --dump-grads FILE      write step 1's gradients (reduced over ranks, before clipping)\n"
        "                         to FILE: safetensors, fp32, the HF names of --init\n"
        "  --device cpu|cuda      backend: this machine's CPUs, or one NVIDIA GPU per rank\n"
        "                         (a build with nvcc only) [cpu]\n"
        "  --threads N            threads of ftrain's pool, shared by all ranks [one per\n"
        "                         available CPU: affinity mask capped by the cgroup quota]\n"
        "  --quiet                no per-step progress on stderr\n"
        "  --help                 this text\n"
        "\n"
        "SIGINT, SIGTERM, SIGHUP: stop after the step under way, with a final record saying\n"
        "so (\"stopped\"); a second signal stops at once.\n"
        "\n"
        "exit status: 0 trained, 1 out of memory (recorded as oom) or stopped at a non-finite\n"
        "loss or gradient norm (recorded as stopped), 2 bad input or an output not written,\n"
        "128 + the signal when a signal stopped it\n",
        out);
}

static int parse_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out, char *err,
                     size_t errlen) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno)
        return ft_errorf(err, errlen, "%s expects an integer, got \"%.40s\"", flag, v);
    if (x < lo || x > hi)
        return ft_errorf(err, errlen, "%s must be in %lld..%lld (got %lld)", flag, (long long)lo,
                         (long long)hi, x);
    *out = x;
    return 0;
}

static int parse_f64(const char *flag, const char *v, double *out, char *err, size_t errlen) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(x))
        return ft_errorf(err, errlen, "%s expects a number, got \"%.40s\"", flag, v);
    *out = x;
    return 0;
}

static int copy_path(const char *flag, const char *v, char *out, size_t n, char *err, size_t errlen) {
    if (!*v) return ft_errorf(err, errlen, "%s expects a path", flag);
    if (!ft_strlcpy(out, v, n)) return ft_errorf(err, errlen, "%s path is too long", flag);
    return 0;
}

/* What the flags set that is not a tr_config field until the end. */
typedef struct cli_state {
    const char *model;          /* --model as given */
    int64_t layers;             /* --layers, -1 = all */
    int64_t global_batch;       /* --global-batch, 0 = not given */
    bool window_set;            /* --record-window given */
} cli_state;

/* Flag results: handled, bad value (err filled), or not a flag of this group. */
enum { FLAG_OK = 0, FLAG_BAD = -1, FLAG_OTHER = 1 };

static int ok_or_bad(int rc) { return rc ? FLAG_BAD : FLAG_OK; }

/* argv[*i] as a flag and its value: "--flag=value" or "--flag value" (then
 * *i moves past the value). 0, or -1 with one line in err. */
static int split_arg(int argc, char **argv, int *i, char flag[48], const char **val, char *err, size_t errlen) {
    const char *a = argv[*i];
    if (strncmp(a, "--", 2)) return ft_errorf(err, errlen, "unexpected argument \"%.40s\" (see --help)", a);
    const char *eq = strchr(a, '=');
    if (eq) {
        size_t n = (size_t)(eq - a);
        if (n >= 48) return ft_errorf(err, errlen, "unknown option \"%.40s\" (see --help)", a);
        memcpy(flag, a, n);
        flag[n] = '\0';
        *val = eq + 1;
        return 0;
    }
    if (!ft_strlcpy(flag, a, 48)) return ft_errorf(err, errlen, "unknown option \"%.40s\" (see --help)", a);
    if (*i + 1 >= argc) return ft_errorf(err, errlen, "%s expects a value (see --help)", flag);
    *val = argv[++*i];
    return 0;
}

static int parse_seed(const char *val, uint64_t *out, char *err, size_t errlen) {
    char *end;
    errno = 0;
    unsigned long long s = strtoull(val, &end, 10);
    if (!*val || *end || errno || val[0] == '-')
        return ft_errorf(err, errlen, "--seed expects a non-negative integer, got \"%.40s\"", val);
    *out = s;
    return 0;
}

/* What is trained, from what: model, blocks, data, initial weights, seed. */
static int model_flag(const char *flag, const char *val, tr_config *c, cli_state *st, char *err, size_t errlen) {
    if (!strcmp(flag, "--model")) {
        st->model = val;
        return *val ? FLAG_OK : ok_or_bad(ft_errorf(err, errlen, "--model expects a name or a path"));
    }
    if (!strcmp(flag, "--layers")) return ok_or_bad(parse_i64(flag, val, 1, FT_MAX_LAYERS, &st->layers, err, errlen));
    if (!strcmp(flag, "--seed")) return ok_or_bad(parse_seed(val, &c->seed, err, errlen));
    if (!strcmp(flag, "--data")) { /* the last --data wins, "synthetic" included */
        c->data_path[0] = '\0';
        if (!strcmp(val, "synthetic")) return FLAG_OK;
        return ok_or_bad(copy_path(flag, val, c->data_path, sizeof c->data_path, err, errlen));
    }
    if (!strcmp(flag, "--init")) {
        c->init_path[0] = '\0';
        if (!strcmp(val, "seeded")) return FLAG_OK;
        return ok_or_bad(copy_path(flag, val, c->init_path, sizeof c->init_path, err, errlen));
    }
    return FLAG_OTHER;
}

/* How much per step: sequence length, batch, accumulation, steps. */
static int batch_flag(const char *flag, const char *val, tr_config *c, cli_state *st, char *err, size_t errlen) {
    if (!strcmp(flag, "--seq")) return ok_or_bad(parse_i64(flag, val, 1, FT_MAX_POSITION, &c->seq_len, err, errlen));
    if (!strcmp(flag, "--batch"))
        return ok_or_bad(parse_i64(flag, val, 1, TR_MAX_BATCH, &c->micro_batch, err, errlen));
    if (!strcmp(flag, "--grad-accum"))
        return ok_or_bad(parse_i64(flag, val, 1, TR_MAX_ACCUM, &c->grad_accum, err, errlen));
    if (!strcmp(flag, "--global-batch"))
        return ok_or_bad(parse_i64(flag, val, 1, (int64_t)TR_MAX_BATCH * TR_MAX_ACCUM, &st->global_batch, err, errlen));
    if (!strcmp(flag, "--steps")) return ok_or_bad(parse_i64(flag, val, 1, TR_MAX_STEPS, &c->steps, err, errlen));
    return FLAG_OTHER;
}

/* Where the bytes go: ranks, ZeRO, offload, recompute, attention, loss, precision. */
static int memory_flag(const char *flag, const char *val, tr_config *c, char *err, size_t errlen) {
    int64_t v;
    if (!strcmp(flag, "--ranks")) {
        int rc = parse_i64(flag, val, 1, TR_MAX_RANKS, &v, err, errlen);
        if (!rc) c->ranks = (int)v;
        return ok_or_bad(rc);
    }
    if (!strcmp(flag, "--zero")) {
        int rc = parse_i64(flag, val, 0, 3, &v, err, errlen);
        if (!rc) c->zero_stage = (int)v;
        return ok_or_bad(rc);
    }
    if (!strcmp(flag, "--offload")) return ok_or_bad(tr_offload_parse(val, &c->offload, err, errlen));
    if (!strcmp(flag, "--checkpointing")) return ok_or_bad(tr_ckpt_parse(val, &c->checkpointing, err, errlen));
    if (!strcmp(flag, "--attention")) return ok_or_bad(tr_attention_parse(val, &c->attention, err, errlen));
    if (!strcmp(flag, "--loss")) return ok_or_bad(tr_loss_parse(val, &c->loss, err, errlen));
    if (!strcmp(flag, "--precision")) return ok_or_bad(tr_precision_parse(val, &c->precision, err, errlen));
    return FLAG_OTHER;
}

/* The update: optimizer, learning-rate schedule, weight decay, clipping. */
static int optimizer_flag(const char *flag, const char *val, tr_config *c, char *err, size_t errlen) {
    if (!strcmp(flag, "--optimizer")) return ok_or_bad(tr_optimizer_parse(val, &c->optimizer, err, errlen));
    if (!strcmp(flag, "--lr")) return ok_or_bad(parse_f64(flag, val, &c->lr, err, errlen));
    if (!strcmp(flag, "--warmup")) return ok_or_bad(parse_i64(flag, val, 0, TR_MAX_STEPS, &c->warmup, err, errlen));
    if (!strcmp(flag, "--weight-decay")) return ok_or_bad(parse_f64(flag, val, &c->weight_decay, err, errlen));
    if (!strcmp(flag, "--clip")) return ok_or_bad(parse_f64(flag, val, &c->clip, err, errlen));
    return FLAG_OTHER;
}

/* Where it runs and what comes out: records, device, threads. */
static int output_flag(const char *flag, const char *val, tr_config *c, cli_state *st, char *err, size_t errlen) {
    if (!strcmp(flag, "--record"))
        return ok_or_bad(copy_path(flag, val, c->record_path, sizeof c->record_path, err, errlen));
    if (!strcmp(flag, "--dump-grads"))
        return ok_or_bad(copy_path(flag, val, c->dump_grads_path, sizeof c->dump_grads_path, err, errlen));
    if (!strcmp(flag, "--record-window")) {
        st->window_set = true;
        if (parse_f64(flag, val, &c->record_window_s, err, errlen)) return FLAG_BAD;
        if (c->record_window_s < 0 || c->record_window_s > 1e6)
            return ok_or_bad(ft_errorf(err, errlen, "--record-window must be in 0..1e6 seconds"));
        return FLAG_OK;
    }
    if (!strcmp(flag, "--device")) {
        if (strcmp(val, "cpu") && strcmp(val, "cuda"))
            return ok_or_bad(ft_errorf(err, errlen, "--device must be cpu or cuda, not \"%.40s\"", val));
        memcpy(c->device, val, strlen(val) + 1);
        return FLAG_OK;
    }
    if (!strcmp(flag, "--threads")) {
        int64_t v;
        int rc = parse_i64(flag, val, 0, 1024, &v, err, errlen);
        if (!rc) c->threads = (int)v;
        return ok_or_bad(rc);
    }
    return FLAG_OTHER;
}

/* One flag with its value, offered to each group in turn. 0, or -1. */
static int apply_flag(const char *flag, const char *val, tr_config *c, cli_state *st, char *err, size_t errlen) {
    int rc = model_flag(flag, val, c, st, err, errlen);
    if (rc == FLAG_OTHER) rc = batch_flag(flag, val, c, st, err, errlen);
    if (rc == FLAG_OTHER) rc = memory_flag(flag, val, c, err, errlen);
    if (rc == FLAG_OTHER) rc = optimizer_flag(flag, val, c, err, errlen);
    if (rc == FLAG_OTHER) rc = output_flag(flag, val, c, st, err, errlen);
    if (rc == FLAG_OTHER) return ft_errorf(err, errlen, "unknown option \"%.40s\" (see --help)", flag);
    return rc;
}

/* After the last flag: what depends on several flags or on the model
 * (loaded here), then the one validation every configuration passes. */
static int finish_config(tr_config *c, const cli_state *st, char *err, size_t errlen) {
    if (st->window_set && !c->record_path[0])
        return ft_errorf(err, errlen, "--record-window does nothing without --record");
    if (ft_model_load(st->model, &c->model, err, errlen)) return -1;
    if (!ft_model_is_llama_family(&c->model))
        return ft_errorf(err, errlen, "ftrain implements Llama, Mistral and Qwen2 blocks; %s is a %s "
                                      "model (estimate it with ftest --framework hf)",
                         c->model.name, ft_arch_name(c->model.arch));
    if (!ft_strlcpy(c->model_arg, st->model, sizeof c->model_arg))
        return ft_errorf(err, errlen, "--model is too long");
    c->layers = st->layers > 0 ? st->layers : c->model.num_layers;
    if (st->global_batch) {
        int64_t per = c->micro_batch * c->ranks;
        if (st->global_batch % per)
            return ft_errorf(err, errlen, "--global-batch %lld is not divisible by ranks x batch = %lld x %lld",
                             (long long)st->global_batch, (long long)c->ranks, (long long)c->micro_batch);
        c->grad_accum = st->global_batch / per;
    }
    return tr_config_validate(c, err, errlen);
}

int tr_cli_parse(int argc, char **argv, tr_config *cfg, bool *help, char *err, size_t errlen) {
    tr_config c;
    memset(&c, 0, sizeof c);
    tr_config_defaults(&c);
    c.record_window_s = 60; /* a kill loses at most a minute of measurement */
    *help = false;
    cli_state st = {.model = "tiny-llama", .layers = -1, .global_batch = 0, .window_set = false};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            *help = true;
            return 0;
        }
        if (!strcmp(argv[i], "--quiet")) {
            c.quiet = true;
            continue;
        }
        char flag[48];
        const char *val = NULL;
        if (split_arg(argc, argv, &i, flag, &val, err, errlen)) return -1;
        if (apply_flag(flag, val, &c, &st, err, errlen)) return -1;
    }
    if (finish_config(&c, &st, err, errlen)) return -1;
    *cfg = c;
    return 0;
}
