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
    "the points FILE already holds. Then fits profiles from FILE and checks it.\n"
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

int cal_options_parse(int argc, char *const argv[], cal_options *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    cal_grid *g = &o->grid;
    ft_strlcpy(o->device, "cpu", sizeof o->device);
    ft_strlcpy(o->python, "python3", sizeof o->python);
    ft_strlcpy(o->gpu, "h100-80gb", sizeof o->gpu);
    ft_strlcpy(o->offload, "none", sizeof o->offload);
    ft_strlcpy(o->attention, "sdpa", sizeof o->attention);
    o->limit_s = 600;
    o->steps = 3;
    o->threads = 1;
    g->world = 1;
    double usd = 0, price = 0, minutes = 0;
    bool precision_set = false, steps_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
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
#define FLAG(s) (!strcmp(name, s))
#define VALUE() (val ? val : (i + 1 < argc ? argv[++i] : NULL))
#define STR(dst)                                                                                \
    do {                                                                                        \
        const char *v_ = VALUE();                                                               \
        if (!v_ || !*v_) return ft_errorf(err, errlen, "%s needs a value", name);               \
        if (!ft_strlcpy(dst, v_, sizeof dst)) return ft_errorf(err, errlen, "%s: too long", name); \
    } while (0)
        int64_t one[1];
        int k;
        if (FLAG("--help")) o->help = true;
        else if (FLAG("--no-fit")) o->no_fit = true;
        else if (FLAG("--dry-run")) o->dry_run = true;
        else if (FLAG("--quiet")) o->quiet = true;
        else if (FLAG("--no-zero-init")) o->no_zero_init = true;
        else if (FLAG("--out")) STR(o->out);
        else if (FLAG("--ftrain")) STR(o->ftrain);
        else if (FLAG("--python")) STR(o->python);
        else if (FLAG("--gpu")) STR(o->gpu);
        else if (FLAG("--profiles")) STR(o->profiles);
        else if (FLAG("--probe")) STR(o->probe);
        else if (FLAG("--device")) {
            STR(o->device);
            if (strcmp(o->device, "cpu") && strcmp(o->device, "cuda"))
                return ft_errorf(err, errlen, "--device is cpu or cuda (got %.20s)", o->device);
        } else if (FLAG("--offload")) {
            STR(o->offload);
            if (strcmp(o->offload, "none") && strcmp(o->offload, "optimizer"))
                return ft_errorf(err, errlen, "--offload for probes is none or optimizer");
        } else if (FLAG("--attention")) {
            STR(o->attention);
            if (strcmp(o->attention, "eager") && strcmp(o->attention, "sdpa"))
                return ft_errorf(err, errlen, "--attention for probes is eager or sdpa");
        } else if (FLAG("--model")) {
            char buf[CAL_MAX_MODELS * 256];
            STR(buf);
            g->nmodels = 0;
            for (char *t = buf, *n; t; t = n) {
                n = strchr(t, ',');
                if (n) *n++ = '\0';
                if (!*t || g->nmodels == CAL_MAX_MODELS || !ft_strlcpy(g->models[g->nmodels], t, 256))
                    return ft_errorf(err, errlen, "--model: at most %d names, none empty", CAL_MAX_MODELS);
                g->nmodels++;
            }
        } else if (FLAG("--seq")) {
            if ((k = cal_parse_int_list(name, VALUE(), 1, EST_MAX_SEQ, g->seqs, CAL_MAX_VALUES, err, errlen)) < 0) return -1;
            g->nseqs = k;
        } else if (FLAG("--batch")) {
            if ((k = cal_parse_int_list(name, VALUE(), 1, EST_MAX_BATCH, g->batches, CAL_MAX_VALUES, err, errlen)) < 0) return -1;
            g->nbatches = k;
        } else if (FLAG("--zero")) {
            int64_t z[4];
            if ((k = cal_parse_int_list(name, VALUE(), 0, 3, z, 4, err, errlen)) < 0) return -1;
            for (int j = 0; j < k; j++) g->zeros[j] = (int)z[j];
            g->nzeros = k;
        } else if (FLAG("--emulate-ranks")) {
            if ((k = cal_parse_int_list(name, VALUE(), 0, 1 << 20, g->emulated, CAL_MAX_VALUES, err, errlen)) < 0) return -1;
            g->nemulated = k;
        } else if (FLAG("--checkpointing")) {
            ENUM_LIST(name, VALUE(), est_checkpointing_parse, g->ckpts, 3, g->nckpts);
        } else if (FLAG("--precision")) {
            ENUM_LIST(name, VALUE(), est_precision_parse, g->precisions, 4, g->nprecisions);
            precision_set = true;
        } else if (FLAG("--ranks") || FLAG("--layers") || FLAG("--steps") || FLAG("--threads") ||
                   FLAG("--refine")) {
            int64_t max = FLAG("--ranks") ? 1024 : FLAG("--layers") ? FT_MAX_LAYERS : FLAG("--refine") ? 10000 : 100000;
            if (cal_parse_int_list(name, VALUE(), FLAG("--refine") ? 0 : 1, max, one, 1, err, errlen) != 1)
                return -1;
            steps_set |= FLAG("--steps");
            *(FLAG("--ranks") ? &g->world : FLAG("--layers") ? &g->layers : FLAG("--steps") ? &o->steps
              : FLAG("--threads") ? &o->threads : &o->refine) = one[0];
        } else if (FLAG("--timeout-s")) {
            if (parse_double(name, VALUE(), 7 * 86400, &o->limit_s, err, errlen) < 0) return -1;
        } else if (FLAG("--budget-minutes")) {
            if (parse_double(name, VALUE(), 1e7, &minutes, err, errlen) < 0) return -1;
        } else if (FLAG("--budget-usd")) {
            if (parse_double(name, VALUE(), 1e9, &usd, err, errlen) < 0) return -1;
        } else if (FLAG("--price-per-hour")) {
            if (parse_double(name, VALUE(), 1e6, &price, err, errlen) < 0) return -1;
        } else {
            return ft_errorf(err, errlen, "calibrate: unknown option \"%.40s\" (see ftest calibrate --help)", a);
        }
#undef FLAG
#undef VALUE
#undef STR
    }
    if (o->help) return 0;
    if (!o->out[0]) return ft_errorf(err, errlen, "calibrate needs --out FILE (the records)");
    if ((usd > 0) != (price > 0))
        return ft_errorf(err, errlen, "--budget-usd and --price-per-hour go together");
    if (minutes > 0 && usd > 0)
        return ft_errorf(err, errlen, "give the budget in minutes or in dollars, not both");
    o->budget_s = minutes > 0 ? minutes * 60 : usd > 0 ? usd / price * 3600 : 0;
    if (!strcmp(o->device, "cuda") && !o->probe[0])
        return ft_errorf(err, errlen, "--device cuda needs --probe MODE: ftrain has no CUDA backend "
                                      "in this build");
    if (o->probe[0] && !strcmp(o->device, "cpu") && strcmp(o->probe, "fsdp2-trace"))
        return ft_errorf(err, errlen, "--probe %.20s runs on a GPU: add --device cuda (only "
                                      "fsdp2-trace runs on the CPU)", o->probe);
    /* Defaults of the grid. */
    if (!g->nmodels) g->nmodels = 1, ft_strlcpy(g->models[0], "tiny-llama", 256);
    if (!g->nseqs) g->nseqs = 1, g->seqs[0] = 32;
    if (!g->nbatches) g->nbatches = 1, g->batches[0] = 2;
    if (!g->nckpts) g->nckpts = 1, g->ckpts[0] = EST_CKPT_NONE;
    if (!g->nzeros) g->nzeros = 1, g->zeros[0] = 0;
    if (!precision_set) g->nprecisions = 1, g->precisions[0] = o->probe[0] ? EST_PREC_BF16_MIXED : EST_PREC_FP32;
    if (o->probe[0]) {
        /* Probes time the median step after 3 warm-up steps (ftest_probe.py --warmup). */
        if (!steps_set) o->steps = 8;
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
    } else {
        ft_strlcpy(g->runner, "ftrain", sizeof g->runner);
        if (g->nemulated) return ft_errorf(err, errlen, "--emulate-ranks is for probes");
    }
    return 0;
}
