/* The shapes of LoHa, LoKr, OFT and FourierFT (peft_delta.h), read from
 * PEFT d787f51's tuners/<method>/layer.py update_layer. */
#include "peft_delta.h"

#include <stdio.h>

#include "json_util.h"
#include "lora.h"

bool est_pdelta_on(const est_run *run) {
    return run->peft == EST_PEFT_LOHA || run->peft == EST_PEFT_LOKR || run->peft == EST_PEFT_OFT ||
           run->peft == EST_PEFT_FOURIERFT || run->peft == EST_PEFT_WAVEFT;
}

/* lokr/layer.py factorization, as written: `length` is set once (1 +
 * dimension) and never lowered, so with factor -1 the search runs up the
 * divisors until m >= n, then swaps. */
void est_pdelta_factorization(int64_t dimension, int64_t factor, int64_t *m_out, int64_t *n_out) {
    if (factor > 0 && dimension % factor == 0) {
        *m_out = factor;
        *n_out = dimension / factor;
        return;
    }
    if (factor == -1) factor = dimension;
    int64_t m = 1, n = dimension;
    const int64_t length = m + n;
    while (m < n) {
        int64_t new_m = m + 1;
        while (dimension % new_m != 0) new_m++;
        const int64_t new_n = dimension / new_m;
        if (new_m + new_n > length || new_m > factor) break;
        m = new_m;
        n = new_n;
    }
    if (m > n) {
        const int64_t s = m;
        m = n;
        n = s;
    }
    *m_out = m;
    *n_out = n;
}

/* lokr/layer.py update_layer (nn.Linear): shape ((l, k), (m, n)); use_w1
 * (decompose_both False: w1 whole); use_w2 = not (r < max(k, n) / 2). */
void est_lokr_shape_of(const est_run *run, int64_t din, int64_t dout, est_lokr_shape *s) {
    est_pdelta_factorization(din, run->pdelta.factor, &s->m, &s->n);
    est_pdelta_factorization(dout, run->pdelta.factor, &s->l, &s->k);
    const int64_t big = s->k > s->n ? s->k : s->n;
    s->w2_whole = !(2 * run->pdelta.rank < big);
}

int64_t est_oft_block(const est_run *run, int64_t din) {
    return run->pdelta.rank > 0 ? din / run->pdelta.rank : 0;
}

int64_t est_pdelta_linear_params(const est_run *run, int64_t din, int64_t dout) {
    const int64_t r = run->pdelta.rank;
    switch (run->peft) {
    case EST_PEFT_LOHA: return 2 * (dout * r + r * din); /* hada_w{1,2}_a, hada_w{1,2}_b */
    case EST_PEFT_LOKR: {
        est_lokr_shape s;
        est_lokr_shape_of(run, din, dout, &s);
        return s.l * s.m + (s.w2_whole ? s.k * s.n : s.k * r + r * s.n);
    }
    case EST_PEFT_OFT: {
        const int64_t b = est_oft_block(run, din);
        return r * (b * (b - 1) / 2); /* OFTRotationModule.weight (r, n_elements) */
    }
    case EST_PEFT_FOURIERFT: return run->pdelta.n_frequency; /* fourierft_spectrum */
    case EST_PEFT_WAVEFT: return run->pdelta.n_frequency;    /* waveft_spectrum */
    default: return 0;
    }
}

int est_pdelta_linear_tensors(const est_run *run) {
    switch (run->peft) {
    case EST_PEFT_LOHA: return 4;
    case EST_PEFT_LOKR: {
        /* the tensor count does not depend on the Linear's shape only when
         * every target takes the same branch; est_pdelta_block_tensors sums */
        return 2;
    }
    case EST_PEFT_OFT:
    case EST_PEFT_FOURIERFT:
    case EST_PEFT_WAVEFT: return 1;
    default: return 0;
    }
}

int64_t est_pdelta_block_params(const est_run *run) {
    if (!est_pdelta_on(run)) return 0;
    int64_t sum = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!(run->pdelta.targets & EST_LORA_BIT(t))) continue;
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        if (din > 0) sum += est_pdelta_linear_params(run, din, dout);
    }
    return sum;
}

int est_pdelta_block_tensors(const est_run *run) {
    if (!est_pdelta_on(run)) return 0;
    int sum = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!(run->pdelta.targets & EST_LORA_BIT(t))) continue;
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        if (din <= 0) continue;
        sum += est_pdelta_linear_tensors(run);
        if (run->peft == EST_PEFT_LOKR) {
            est_lokr_shape s;
            est_lokr_shape_of(run, din, dout, &s);
            if (!s.w2_whole) sum++; /* lokr_w2_a and lokr_w2_b */
        }
    }
    return sum;
}

static const char *method_name(est_peft p) {
    switch (p) {
    case EST_PEFT_LOHA: return "loha";
    case EST_PEFT_LOKR: return "lokr";
    case EST_PEFT_OFT: return "oft";
    case EST_PEFT_WAVEFT: return "waveft";
    default: return "fourierft";
    }
}

/* Each target's own shape against the method. */
static int validate_target(const est_run *run, int64_t din, int64_t dout, char *err, size_t errlen) {
    if (run->peft == EST_PEFT_OFT && din % run->pdelta.rank != 0)
        return ft_errorf(err, errlen, "--peft oft: r %lld does not divide in_features %lld (PEFT then "
                                      "adjusts r to a divisor: name that r)",
                         (long long)run->pdelta.rank, (long long)din);
    if (run->peft == EST_PEFT_OFT && din / run->pdelta.rank < 2)
        return ft_errorf(err, errlen, "--peft oft: r %lld leaves blocks of one element",
                         (long long)run->pdelta.rank);
    if ((run->peft == EST_PEFT_FOURIERFT || run->peft == EST_PEFT_WAVEFT) && run->pdelta.n_frequency > din * dout)
        return ft_errorf(err, errlen, "--n-frequency %lld is above in_features x out_features (%lld)",
                         (long long)run->pdelta.n_frequency, (long long)(din * dout));
    return 0;
}

int est_pdelta_validate(const est_run *run, char *err, size_t errlen) {
    if (!est_pdelta_on(run)) return 0;
    const bool ranked = run->peft != EST_PEFT_FOURIERFT && run->peft != EST_PEFT_WAVEFT;
    if (ranked && run->pdelta.rank < 1)
        return ft_errorf(err, errlen, "--peft %s needs --peft-rank R of 1 or more", method_name(run->peft));
    if (!ranked && run->pdelta.n_frequency < 1)
        return ft_errorf(err, errlen, "--peft %s needs --n-frequency N of 1 or more", method_name(run->peft));
    if (run->peft == EST_PEFT_LOKR && run->pdelta.factor != -1 && run->pdelta.factor < 1)
        return ft_errorf(err, errlen, "--lokr-factor must be -1 or a positive integer");
    if (run->pdelta.targets == 0 || (run->pdelta.targets & ~EST_LORA_ALL_LINEAR))
        return ft_errorf(err, errlen, "--peft-targets names no linear layer");
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!(run->pdelta.targets & EST_LORA_BIT(t))) continue;
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        if (din > 0 && validate_target(run, din, dout, err, errlen) < 0) return -1;
    }
    return 0;
}

void est_pdelta_label(const est_run *run, char *buf, size_t n) {
    char targets[64];
    est_lora_targets_name(run->pdelta.targets, targets, sizeof targets);
    const long long r = (long long)run->pdelta.rank;
    switch (run->peft) {
    case EST_PEFT_LOHA: snprintf(buf, n, "LoHa r%lld on %s", r, targets); break;
    case EST_PEFT_LOKR:
        snprintf(buf, n, "LoKr r%lld factor %lld on %s", r, (long long)run->pdelta.factor, targets);
        break;
    case EST_PEFT_OFT: snprintf(buf, n, "OFT r%lld on %s", r, targets); break;
    case EST_PEFT_WAVEFT:
        snprintf(buf, n, "WaveFT db1 %lld coefficients on %s", (long long)run->pdelta.n_frequency, targets);
        break;
    default:
        snprintf(buf, n, "FourierFT %lld frequencies on %s", (long long)run->pdelta.n_frequency, targets);
        break;
    }
}
