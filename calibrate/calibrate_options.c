/* `ftest calibrate`'s command line, parsed without side effects (no printing,
 * no file access). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate.h"
#include "json_util.h"

const char cal_usage[] =
    "usage: ftest calibrate --out FILE [--device cpu|cuda] [--probe MODE] [grid] [limits]\n"
    "\n"
    "Runs a grid of training runs, one child process per point, and appends each\n"
    "finished record to FILE (one whole line, flock'ed and fsync'ed); a rerun skips\n"
    "the points FILE already holds, but runs again those that failed; sweeps run\n"
    "together into one FILE claim each point first (FILE.claims). Then fits profiles\n"
    "from FILE and checks it. Exit 0 done, 1 a point failed or the check failed,\n"
    "2 bad input or output that could not be written, 130 interrupted.\n"
    "\n"
    "runner:\n"
    "  --device cpu        ftrain's CPU backend (the default)\n"
    "  --device cuda       needs --probe: ftrain has no CUDA backend in this build\n"
    "  --probe MODE        calibrate/probes/ftest_probe.py --mode MODE (hf, deepspeed, fsdp,\n"
    "                      fsdp2, lora, qlora, adam8bit, fsdp2-trace); on a GPU machine\n"
    "  --ftrain PATH, --python PATH   the programs to run\n"
    "grid (lists A,B,C or ranges START:STOP[:STEP]):\n"
    "  --model NAME[,NAME] models (default tiny-llama)\n"
    "  --seq LIST          tokens per sequence (default 32)\n"
    "  --batch LIST        micro-batch (default 2)\n"
    "  --checkpointing L   none,selective,full (default none)\n"
    "  --zero LIST         ZeRO stages (default 0)\n"
    "  --precision L       fp32,bf16-mixed,... (default fp32 on cpu, bf16-mixed for probes)\n"
    "  --ranks N           ftrain ranks / the world size a probe stands for (default 1)\n"
    "  --emulate-ranks L   probes: the ranks of N to measure (default 0 and N-1)\n"
    "  --layers K          truncated depth: every point at K/2 and K blocks; the K record\n"
    "                      states the per-layer extrapolation to the full depth\n"
    "  --offload O, --attention A, --no-zero-init   passed to probes\n"
    "limits:\n"
    "  --timeout-s S       per point (default 600); a point past it is an outcome\n"
    "  --budget-minutes M  start no point that would end past M minutes\n"
    "  --budget-usd D --price-per-hour P   the same budget in money\n"
    "  --steps N           optimizer steps per point (ftrain 3; probes 8, the first 3 warm up)\n"
    "  --threads N         ftrain's OpenMP threads (default 1)\n"
    "  --refine N          after the grid, up to N points where the estimate errs most\n"
    "after the sweep:\n"
    "  --profiles DIR      where the fit writes (default profiles/ beside FILE)\n"
    "  --no-fit            skip the fit and the check\n"
    "  --dry-run           print the plan and run nothing\n"
    "  --quiet             no progress lines\n";

static int parse_double(const char *opt, const char *s, double max, double *out, char *err,
                        size_t errlen) {
    if (!s || !*s) return ft_errorf(err, errlen, "%s needs a value", opt);
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || v <= 0 || v > max)
        return ft_errorf(err, errlen, "%s: \"%.40s\" is not a number in (0, %g]", opt, s, max);
    *out = v;
    return 0;
}

/* Splits "a,b" and parses each with `parse` into out[]. */
#define ENUM_LIST(opt, s, parse, out, cap, count)                                               \
    do {                                                                                        \
        char buf_[256];                                                                         \
        const char *s_ = (s);                                                                   \
        if (!s_ || !ft_strlcpy(buf_, s_, sizeof buf_))                                          \
            return ft_errorf(err, errlen, "%s needs a value", opt);                             \
        (count) = 0;                                                                            \
        for (char *t_ = buf_, *n_; t_; t_ = n_) {                                               \
            n_ = strchr(t_, ',');                                                               \
            if (n_) *n_++ = '\0';                                                               \
            if ((count) == (cap)) return ft_errorf(err, errlen, "%s: too many values", opt);    \
            if (parse(t_, &(out)[(count)], err, errlen) < 0) return -1;                         \
            (count)++;                                                                          \
        }                                                                                       \
    } while (0)

/* The options being parsed, and what is only known once all are read. */
typedef struct cal_parse {
    cal_options *o;
    double usd, price, minutes;        /* --budget-usd, --price-per-hour, --budget-minutes */
    bool precision_set, steps_set;
} cal_parse;

/* v is the option's value: NULL when the command line ends before it. */
typedef int (*cal_handler)(cal_parse *p, const char *name, const char *v, char *err, size_t errlen);

/* A non-empty value into dst[n]. */
static int copy_value(const char *name, const char *v, char *dst, size_t n, char *err, size_t errlen) {
    if (!v || !*v) return ft_errorf(err, errlen, "%s needs a value", name);
    if (!ft_strlcpy(dst, v, n)) return ft_errorf(err, errlen, "%s: too long", name);
    return 0;
}

static int set_device(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    cal_options *o = p->o;
    if (copy_value(name, v, o->device, sizeof o->device, err, errlen)) return -1;
    if (strcmp(o->device, "cpu") && strcmp(o->device, "cuda"))
        return ft_errorf(err, errlen, "--device is cpu or cuda (got %.20s)", o->device);
    return 0;
}

static int set_probe_offload(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    cal_options *o = p->o;
    if (copy_value(name, v, o->offload, sizeof o->offload, err, errlen)) return -1;
    if (strcmp(o->offload, "none") && strcmp(o->offload, "optimizer"))
        return ft_errorf(err, errlen, "--offload for probes is none or optimizer");
    return 0;
}

static int set_probe_attention(cal_parse *p, const char *name, const char *v, char *err,
                               size_t errlen) {
    cal_options *o = p->o;
    if (copy_value(name, v, o->attention, sizeof o->attention, err, errlen)) return -1;
    if (strcmp(o->attention, "eager") && strcmp(o->attention, "sdpa"))
        return ft_errorf(err, errlen, "--attention for probes is eager or sdpa");
    return 0;
}

/* --model A,B: at most CAL_MAX_MODELS names. */
static int set_models(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    cal_grid *g = &p->o->grid;
    char buf[CAL_MAX_MODELS * 256];
    if (copy_value(name, v, buf, sizeof buf, err, errlen)) return -1;
    g->nmodels = 0;
    for (char *t = buf, *n; t; t = n) {
        n = strchr(t, ',');
        if (n) *n++ = '\0';
        if (!*t || g->nmodels == CAL_MAX_MODELS || !ft_strlcpy(g->models[g->nmodels], t, 256))
            return ft_errorf(err, errlen, "--model: at most %d names, none empty", CAL_MAX_MODELS);
        g->nmodels++;
    }
    return 0;
}

static int set_seqs(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    cal_grid *g = &p->o->grid;
    int k = cal_parse_int_list(name, v, 1, EST_MAX_SEQ, g->seqs, CAL_MAX_VALUES, err, errlen);
    if (k < 0) return -1;
    g->nseqs = k;
    return 0;
}

static int set_batches(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    cal_grid *g = &p->o->grid;
    int k = cal_parse_int_list(name, v, 1, EST_MAX_BATCH, g->batches, CAL_MAX_VALUES, err, errlen);
    if (k < 0) return -1;
    g->nbatches = k;
    return 0;
}

static int set_zeros(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    cal_grid *g = &p->o->grid;
    int64_t z[4];
    int k = cal_parse_int_list(name, v, 0, 3, z, 4, err, errlen);
    if (k < 0) return -1;
    for (int j = 0; j < k; j++) g->zeros[j] = (int)z[j];
    g->nzeros = k;
    return 0;
}

static int set_emulated(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    cal_grid *g = &p->o->grid;
    int k = cal_parse_int_list(name, v, 0, 1 << 20, g->emulated, CAL_MAX_VALUES, err, errlen);
    if (k < 0) return -1;
    g->nemulated = k;
    return 0;
}

static int set_ckpts(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    cal_grid *g = &p->o->grid;
    ENUM_LIST(name, v, est_checkpointing_parse, g->ckpts, 3, g->nckpts);
    return 0;
}

static int set_precisions(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    cal_grid *g = &p->o->grid;
    ENUM_LIST(name, v, est_precision_parse, g->precisions, 4, g->nprecisions);
    p->precision_set = true;
    return 0;
}

/* One whole number: --ranks, --layers, --steps, --threads or --refine. */
static int set_count(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    cal_options *o = p->o;
    cal_grid *g = &o->grid;
#define FLAG(s) (!strcmp(name, s))
    int64_t one[1];
    int64_t max = FLAG("--ranks") ? 1024 : FLAG("--layers") ? FT_MAX_LAYERS : FLAG("--refine") ? 10000 : 100000;
    if (cal_parse_int_list(name, v, FLAG("--refine") ? 0 : 1, max, one, 1, err, errlen) != 1)
        return -1;
    p->steps_set |= FLAG("--steps");
    *(FLAG("--ranks") ? &g->world : FLAG("--layers") ? &g->layers : FLAG("--steps") ? &o->steps
      : FLAG("--threads") ? &o->threads : &o->refine) = one[0];
#undef FLAG
    return 0;
}

static int set_timeout(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    return parse_double(name, v, 7 * 86400, &p->o->limit_s, err, errlen);
}

static int set_budget_minutes(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    return parse_double(name, v, 1e7, &p->minutes, err, errlen);
}

static int set_budget_usd(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    return parse_double(name, v, 1e9, &p->usd, err, errlen);
}

static int set_price(cal_parse *p, const char *name, const char *v, char *err, size_t errlen) {
    return parse_double(name, v, 1e6, &p->price, err, errlen);
}

typedef enum {
    CAL_SWITCH, /* no value: sets the bool at field */
    CAL_STRING, /* a non-empty value into the char array at field, of size bytes */
    CAL_CUSTOM, /* handler gets the value */
} cal_opt_kind;

typedef struct {
    const char *name;
    cal_opt_kind kind;
    size_t field, size;  /* offsetof / sizeof in cal_options (not CAL_CUSTOM) */
    cal_handler handler; /* CAL_CUSTOM */
} cal_option;

#define AT(f) offsetof(cal_options, f)
#define SWITCH(n, f) {.name = n, .kind = CAL_SWITCH, .field = AT(f)}
#define STRING(n, f) {.name = n, .kind = CAL_STRING, .field = AT(f), .size = sizeof(((cal_options *)0)->f)}
#define CUSTOM(n, h) {.name = n, .kind = CAL_CUSTOM, .handler = h}

/* Every option of `ftest calibrate` (cal_usage describes them). */
static const cal_option CAL_OPTIONS[] = {
    SWITCH("--help", help),
    SWITCH("--no-fit", no_fit),
    SWITCH("--dry-run", dry_run),
    SWITCH("--quiet", quiet),
    SWITCH("--no-zero-init", no_zero_init),
    STRING("--out", out),
    STRING("--ftrain", ftrain),
    STRING("--python", python),
    STRING("--gpu", gpu),
    STRING("--profiles", profiles),
    STRING("--probe", probe),
    CUSTOM("--device", set_device),
    CUSTOM("--offload", set_probe_offload),
    CUSTOM("--attention", set_probe_attention),
    CUSTOM("--model", set_models),
    CUSTOM("--seq", set_seqs),
    CUSTOM("--batch", set_batches),
    CUSTOM("--zero", set_zeros),
    CUSTOM("--emulate-ranks", set_emulated),
    CUSTOM("--checkpointing", set_ckpts),
    CUSTOM("--precision", set_precisions),
    CUSTOM("--ranks", set_count),
    CUSTOM("--layers", set_count),
    CUSTOM("--steps", set_count),
    CUSTOM("--threads", set_count),
    CUSTOM("--refine", set_count),
    CUSTOM("--timeout-s", set_timeout),
    CUSTOM("--budget-minutes", set_budget_minutes),
    CUSTOM("--budget-usd", set_budget_usd),
    CUSTOM("--price-per-hour", set_price),
};

#undef AT
#undef SWITCH
#undef STRING
#undef CUSTOM

/* One option at argv[*i] ("--name value" or "--name=value"); *i moves past a
 * value taken from the next argument. */
static int parse_option(int argc, char *const argv[], int *i, cal_parse *p, char *err, size_t errlen) {
    const char *a = argv[*i];
    char name[48];
    const char *val = NULL, *eq = strchr(a, '=');
    if (a[0] != '-' || a[1] != '-')
        return ft_errorf(err, errlen, "calibrate: unexpected argument \"%.40s\"", a);
    if (eq && (size_t)(eq - a) < sizeof name) {
        memcpy(name, a, (size_t)(eq - a));
        name[eq - a] = '\0';
        val = eq + 1;
    } else if (!ft_strlcpy(name, a, sizeof name)) {
        return ft_errorf(err, errlen, "calibrate: unknown option \"%.40s...\"", a);
    }
    const cal_option *opt = NULL;
    for (size_t k = 0; k < sizeof CAL_OPTIONS / sizeof CAL_OPTIONS[0] && !opt; k++)
        if (!strcmp(CAL_OPTIONS[k].name, name)) opt = &CAL_OPTIONS[k];
    if (!opt)
        return ft_errorf(err, errlen, "calibrate: unknown option \"%.40s\" (see ftest calibrate --help)", a);
    char *base = (char *)p->o;
    if (opt->kind == CAL_SWITCH) {
        *(bool *)(base + opt->field) = true;
        return 0;
    }
    const char *v = val ? val : (*i + 1 < argc ? argv[++*i] : NULL);
    if (opt->kind == CAL_STRING) return copy_value(name, v, base + opt->field, opt->size, err, errlen);
    return opt->handler(p, name, v, err, errlen);
}

/* The budget (minutes, or dollars at a price) and the runner (ftrain, or a probe on a GPU). */
static int check_budget_and_runner(const cal_parse *p, char *err, size_t errlen) {
    cal_options *o = p->o;
    if ((p->usd > 0) != (p->price > 0))
        return ft_errorf(err, errlen, "--budget-usd and --price-per-hour go together");
    if (p->minutes > 0 && p->usd > 0)
        return ft_errorf(err, errlen, "give the budget in minutes or in dollars, not both");
    o->budget_s = p->minutes > 0 ? p->minutes * 60 : p->usd > 0 ? p->usd / p->price * 3600 : 0;
    if (!strcmp(o->device, "cuda") && !o->probe[0])
        return ft_errorf(err, errlen, "--device cuda needs --probe MODE: ftrain has no CUDA backend "
                                      "in this build");
    if (o->probe[0] && !strcmp(o->device, "cpu") && strcmp(o->probe, "fsdp2-trace"))
        return ft_errorf(err, errlen, "--probe %.20s runs on a GPU: add --device cuda (only "
                                      "fsdp2-trace runs on the CPU)", o->probe);
    return 0;
}

/* Defaults of the grid for what was not given. */
static void grid_defaults(const cal_parse *p) {
    cal_options *o = p->o;
    cal_grid *g = &o->grid;
    if (!g->nmodels) g->nmodels = 1, ft_strlcpy(g->models[0], "tiny-llama", 256);
    if (!g->nseqs) g->nseqs = 1, g->seqs[0] = 32;
    if (!g->nbatches) g->nbatches = 1, g->batches[0] = 2;
    if (!g->nckpts) g->nckpts = 1, g->ckpts[0] = EST_CKPT_NONE;
    if (!g->nzeros) g->nzeros = 1, g->zeros[0] = 0;
    if (!p->precision_set) g->nprecisions = 1, g->precisions[0] = o->probe[0] ? EST_PREC_BF16_MIXED : EST_PREC_FP32;
}

/* The runner that starts every key; a probe's steps and emulated ranks. */
static int set_runner(const cal_parse *p, char *err, size_t errlen) {
    cal_options *o = p->o;
    cal_grid *g = &o->grid;
    if (!o->probe[0]) {
        ft_strlcpy(g->runner, "ftrain", sizeof g->runner);
        if (g->nemulated) return ft_errorf(err, errlen, "--emulate-ranks is for probes");
        return 0;
    }
    /* Probes time the median step after 3 warm-up steps (ftest_probe.py --warmup). */
    if (!p->steps_set) o->steps = 8;
    if (o->steps < 4) return ft_errorf(err, errlen, "probes need --steps 4 or more (3 warm up)");
    snprintf(g->runner, sizeof g->runner, "probe:%.30s gpu=%.30s offload=%s attention=%s zero_init=%d",
             o->probe, o->gpu, o->offload, o->attention, !o->no_zero_init);
    if (!g->nemulated) {
        g->emulated[g->nemulated++] = 0;
        if (g->world > 1) g->emulated[g->nemulated++] = g->world - 1;
    }
    for (int j = 0; j < g->nemulated; j++)
        if (g->emulated[j] >= g->world)
            return ft_errorf(err, errlen, "--emulate-ranks %lld is not a rank of --ranks %lld",
                             (long long)g->emulated[j], (long long)g->world);
    return 0;
}

int cal_options_parse(int argc, char *const argv[], cal_options *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    ft_strlcpy(o->device, "cpu", sizeof o->device);
    ft_strlcpy(o->python, "python3", sizeof o->python);
    ft_strlcpy(o->gpu, "h100-80gb", sizeof o->gpu);
    ft_strlcpy(o->offload, "none", sizeof o->offload);
    ft_strlcpy(o->attention, "sdpa", sizeof o->attention);
    o->limit_s = 600;
    o->steps = 3;
    o->threads = 1;
    o->grid.world = 1;
    cal_parse p = {.o = o};
    for (int i = 1; i < argc; i++)
        if (parse_option(argc, argv, &i, &p, err, errlen) < 0) return -1;
    if (o->help) return 0;
    if (!o->out[0]) return ft_errorf(err, errlen, "calibrate needs --out FILE (the records)");
    if (check_budget_and_runner(&p, err, errlen) < 0) return -1;
    grid_defaults(&p);
    return set_runner(&p, err, errlen);
}
