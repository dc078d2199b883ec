/* The op-level parity harness (trainer_parity.h) and its naive reference
 * backend. Shapes are small and odd on purpose (rows not a multiple of a
 * vector width, grouped-query heads, T not a tile multiple) so that tiling
 * and tail paths run. */
#include "trainer_parity.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "optim.h"

/* Shapes of every case. */
enum { N = 7, H = 36, C = 36, OC = 44, V = 50, I = 20, B = 2, T = 9, NH = 4, NKV = 2, HD = 16 };
#define ROW ((NH + 2 * NKV) * HD)
#define QKV_N ((int64_t)B * T * ROW)
#define Q_N ((int64_t)B * T * NH * HD)
#define P_N ((int64_t)B * NH * T * T)
#define LSE_N ((int64_t)B * NH * T)
#define EPS_NORM 1e-5
#define THETA 10000.0

/* ---------------- the naive reference backend ---------------- */

static void ref_add(tr_backend_ctx *cx, void *y, const void *x, int64_t n, tr_dtype dt) {
    (void)cx;
    for (int64_t i = 0; i < n; i++) tr_st(y, i, (float)((double)tr_ld(y, i, dt) + tr_ld(x, i, dt)), dt);
}
static void ref_emb_f(tr_backend_ctx *cx, void *out, const int32_t *tok, const void *wte, int64_t n, int64_t h,
                      tr_dtype dt) {
    (void)cx;
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < h; j++) tr_st(out, r * h + j, tr_ld(wte, (int64_t)tok[r] * h + j, dt), dt);
}
static void ref_emb_b(tr_backend_ctx *cx, void *dwte, const void *dout, const int32_t *tok, int64_t n, int64_t h,
                      tr_dtype dt) {
    (void)cx;
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < h; j++) {
            int64_t k = (int64_t)tok[r] * h + j;
            tr_st(dwte, k, (float)((double)tr_ld(dwte, k, dt) + tr_ld(dout, r * h + j, dt)), dt);
        }
}
/* y_j = x_j r w_j with r = (mean x^2 + eps)^(-1/2). */
static void ref_rms_f(tr_backend_ctx *cx, void *out, float *rstd, const void *inp, const void *w, int64_t n,
                      int64_t h, double eps, tr_dtype dt) {
    (void)cx;
    for (int64_t r = 0; r < n; r++) {
        double ss = 0;
        for (int64_t j = 0; j < h; j++) ss += (double)tr_ld(inp, r * h + j, dt) * tr_ld(inp, r * h + j, dt);
        double rs = 1.0 / sqrt(ss / (double)h + eps);
        rstd[r] = (float)rs;
        for (int64_t j = 0; j < h; j++) tr_st(out, r * h + j, (float)(tr_ld(inp, r * h + j, dt) * rs * tr_ld(w, j, dt)), dt);
    }
}
/* dw_j += sum_rows dy_j x_j r ; dx_k += r w_k dy_k - r^3/h x_k sum_j dy_j w_j x_j. */
static void ref_rms_b(tr_backend_ctx *cx, void *dinp, void *dw, const void *dout, const void *inp, const void *w,
                      const float *rstd, int64_t n, int64_t h, tr_dtype dt) {
    (void)cx;
    double *dwacc = calloc((size_t)h, sizeof *dwacc);
    for (int64_t r = 0; r < n; r++) {
        double rs = rstd[r], dot = 0;
        for (int64_t j = 0; j < h; j++)
            dot += (double)tr_ld(dout, r * h + j, dt) * tr_ld(w, j, dt) * tr_ld(inp, r * h + j, dt);
        for (int64_t k = 0; k < h; k++) {
            double x = tr_ld(inp, r * h + k, dt), dy = tr_ld(dout, r * h + k, dt);
            dwacc[k] += dy * x * rs;
            double g = rs * tr_ld(w, k, dt) * dy - rs * rs * rs / (double)h * x * dot;
            tr_st(dinp, r * h + k, (float)(tr_ld(dinp, r * h + k, dt) + g), dt);
        }
    }
    for (int64_t k = 0; k < h; k++) tr_st(dw, k, (float)(tr_ld(dw, k, dt) + dwacc[k]), dt);
    free(dwacc);
}
/* Rotation of pairs (i, i + hd/2) by pos * theta^(-2i/hd); sign -1 undoes it. */
static void ref_rope(void *qkv, int64_t Bn, int64_t Tn, int64_t nh, int64_t nkv, int64_t hd, double theta,
                     tr_dtype dt, double sign) {
    const int64_t row = (nh + 2 * nkv) * hd, half = hd / 2;
    for (int64_t b = 0; b < Bn; b++)
        for (int64_t t = 0; t < Tn; t++)
            for (int64_t hh = 0; hh < nh + nkv; hh++)
                for (int64_t i = 0; i < half; i++) {
                    double ang = (double)t * pow(theta, -2.0 * (double)i / (double)hd);
                    double cs = cos(ang), sn = sign * sin(ang);
                    int64_t k1 = (b * Tn + t) * row + hh * hd + i, k2 = k1 + half;
                    double v1 = tr_ld(qkv, k1, dt), v2 = tr_ld(qkv, k2, dt);
                    tr_st(qkv, k1, (float)(v1 * cs - v2 * sn), dt);
                    tr_st(qkv, k2, (float)(v2 * cs + v1 * sn), dt);
                }
}
static void ref_rope_f(tr_backend_ctx *cx, void *qkv, int64_t Bn, int64_t Tn, int64_t nh, int64_t nkv, int64_t hd,
                       double theta, tr_dtype dt) {
    (void)cx;
    ref_rope(qkv, Bn, Tn, nh, nkv, hd, theta, dt, 1.0);
}
static void ref_rope_b(tr_backend_ctx *cx, void *dqkv, int64_t Bn, int64_t Tn, int64_t nh, int64_t nkv, int64_t hd,
                       double theta, tr_dtype dt) {
    (void)cx;
    ref_rope(dqkv, Bn, Tn, nh, nkv, hd, theta, dt, -1.0);
}
static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static void ref_sw_f(tr_backend_ctx *cx, void *hact, const void *gu, int64_t n, int64_t In, tr_dtype dt) {
    (void)cx;
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < In; j++) {
            double g = tr_ld(gu, r * 2 * In + j, dt), u = tr_ld(gu, r * 2 * In + In + j, dt);
            tr_st(hact, r * In + j, (float)(g * sigmoid(g) * u), dt);
        }
}
/* d gate = dh u (s + g s (1 - s)), d up = dh g s, with s = sigmoid(g). */
static void ref_sw_b(tr_backend_ctx *cx, void *dgu, const void *dhact, const void *gu, int64_t n, int64_t In,
                     tr_dtype dt) {
    (void)cx;
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < In; j++) {
            double g = tr_ld(gu, r * 2 * In + j, dt), u = tr_ld(gu, r * 2 * In + In + j, dt);
            double dh = tr_ld(dhact, r * In + j, dt), s = sigmoid(g);
            tr_st(dgu, r * 2 * In + j, (float)(dh * u * (s + g * s * (1 - s))), dt);
            tr_st(dgu, r * 2 * In + In + j, (float)(dh * g * s), dt);
        }
}
static double row_lse(const void *z, int64_t r, int64_t Vn, tr_dtype dt) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < Vn; j++) mx = fmax(mx, tr_ld(z, r * Vn + j, dt));
    for (int64_t j = 0; j < Vn; j++) s += exp(tr_ld(z, r * Vn + j, dt) - mx);
    return mx + log(s);
}
static void ref_ce_f(tr_backend_ctx *cx, float *losses, const void *z, const int32_t *tgt, int64_t n, int64_t Vn,
                     tr_dtype dt) {
    (void)cx;
    for (int64_t r = 0; r < n; r++) losses[r] = (float)(row_lse(z, r, Vn, dt) - tr_ld(z, r * Vn + tgt[r], dt));
}
static void ref_ce_b(tr_backend_ctx *cx, void *z, const int32_t *tgt, int64_t n, int64_t Vn, float scale,
                     tr_dtype dt) {
    (void)cx;
    for (int64_t r = 0; r < n; r++) {
        double lse = row_lse(z, r, Vn, dt);
        for (int64_t j = 0; j < Vn; j++) {
            double p = exp(tr_ld(z, r * Vn + j, dt) - lse) - (j == tgt[r] ? 1.0 : 0.0);
            tr_st(z, r * Vn + j, (float)(scale * p), dt);
        }
    }
}
/* AdamW (Loshchilov & Hutter 2019) with bias correction, as optim.h states it. */
static void ref_adamw(tr_backend_ctx *cx, float *w, void *wout, tr_dtype wdt, const void *g, tr_dtype gdt, float *m,
                      float *v, int64_t n, const tr_opt_args *a) {
    (void)cx;
    const double b1 = TR_ADAM_BETA1, b2 = TR_ADAM_BETA2;
    const double c1 = 1 - pow(b1, (double)a->t), c2 = 1 - pow(b2, (double)a->t);
    for (int64_t i = 0; i < n; i++) {
        double gi = (double)tr_ld(g, i, gdt) * a->grad_scale;
        double mi = b1 * m[i] + (1 - b1) * gi, vi = b2 * v[i] + (1 - b2) * gi * gi;
        m[i] = (float)mi;
        v[i] = (float)vi;
        double wi = w[i] - (double)a->lr * ((mi / c1) / (sqrt(vi / c2) + TR_ADAM_EPS) + (double)a->weight_decay * w[i]);
        w[i] = (float)wi;
        if (wout) tr_st(wout, i, (float)wi, wdt);
    }
}
static void ref_sgd(tr_backend_ctx *cx, float *w, void *wout, tr_dtype wdt, const void *g, tr_dtype gdt, int64_t n,
                    const tr_opt_args *a) {
    (void)cx;
    for (int64_t i = 0; i < n; i++) {
        double wi = w[i] - (double)a->lr * ((double)tr_ld(g, i, gdt) * a->grad_scale + (double)a->weight_decay * w[i]);
        w[i] = (float)wi;
        if (wout) tr_st(wout, i, (float)wi, wdt);
    }
}
static double ref_sumsq(tr_backend_ctx *cx, const void *p, int64_t n, tr_dtype dt) {
    (void)cx;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)tr_ld(p, i, dt) * tr_ld(p, i, dt);
    return s;
}
static void ref_convert(tr_backend_ctx *cx, void *dst, tr_dtype ddt, const void *src, tr_dtype sdt, int64_t n) {
    (void)cx;
    for (int64_t i = 0; i < n; i++) tr_st(dst, i, tr_ld(src, i, sdt), ddt);
}
static void ref_down(tr_backend_ctx *cx, float *dst, const void *src, tr_dtype sdt, int64_t n) {
    ref_convert(cx, dst, TR_F32, src, sdt, n);
}
static void ref_up(tr_backend_ctx *cx, void *dst, tr_dtype ddt, const float *src, int64_t n) {
    ref_convert(cx, dst, ddt, src, TR_F32, n);
}
static void ref_mm_f(tr_backend_ctx *cx, void *out, const void *inp, const void *w, const void *bias, int64_t n,
                     int64_t c, int64_t oc, tr_dtype dt) {
    (void)cx;
    tr_cpu_matmul_fwd_ref(out, inp, w, bias, n, c, oc, dt);
}
static void ref_mm_b(tr_backend_ctx *cx, void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                     const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype dt) {
    (void)cx;
    tr_cpu_matmul_bwd_ref(dinp, dw, dbias, dout, inp, w, n, c, oc, dt);
}
static void ref_af_f(tr_backend_ctx *cx, void *out, float *lse, const void *qkv, int64_t Bn, int64_t Tn, int64_t nh,
                     int64_t nkv, int64_t hd, tr_dtype dt) {
    (void)cx;
    tr_cpu_attn_flash_fwd_ref(out, lse, qkv, Bn, Tn, nh, nkv, hd, dt);
}
static void ref_af_b(tr_backend_ctx *cx, void *dqkv, const void *dout, const void *qkv, const void *out,
                     const float *lse, int64_t Bn, int64_t Tn, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    (void)cx;
    tr_cpu_attn_flash_bwd_ref(dqkv, dout, qkv, out, lse, Bn, Tn, nh, nkv, hd, dt);
}

static const tr_backend *cpu_ops(void) { return tr_backend_cpu(); }

static tr_backend ref_backend;

const tr_backend *tr_parity_reference_backend(void) {
    if (!ref_backend.name) {
        tr_backend r = *cpu_ops();  /* context, memory, copies and eager attention */
        r.name = "reference";
        r.convert = ref_convert;
        r.download_f32 = ref_down;
        r.upload_f32 = ref_up;
        r.sumsq = ref_sumsq;
        r.add = ref_add;
        r.embedding_fwd = ref_emb_f;
        r.embedding_bwd = ref_emb_b;
        r.rmsnorm_fwd = ref_rms_f;
        r.rmsnorm_bwd = ref_rms_b;
        r.matmul_fwd = ref_mm_f;
        r.matmul_bwd = ref_mm_b;
        r.rope_fwd = ref_rope_f;
        r.rope_bwd = ref_rope_b;
        r.attn_flash_fwd = ref_af_f;
        r.attn_flash_bwd = ref_af_b;
        r.swiglu_fwd = ref_sw_f;
        r.swiglu_bwd = ref_sw_b;
        r.ce_fwd = ref_ce_f;
        r.ce_bwd = ref_ce_b;
        r.adamw = ref_adamw;
        r.sgd = ref_sgd;
        ref_backend = r;
    }
    return &ref_backend;
}

/* ---------------- the harness ---------------- */

typedef struct side {
    const tr_backend *be;
    tr_backend_ctx ctx;
    void *bufs[32];
    int nb;
} side;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* xorshift64, uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float *hrand(int64_t n, float scale) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = scale * frand();
    return v;
}

static void *dev_alloc(side *s, int64_t bytes) {
    void *p = s->be->mem.alloc((size_t)bytes);
    if (p && s->nb < 32) s->bufs[s->nb++] = p;
    return p;
}
/* Host fp32 -> device dt (rounded there, by the backend). */
static void *up(side *s, const float *h, int64_t n, tr_dtype dt) {
    void *p = dev_alloc(s, n * tr_dtype_bytes(dt));
    if (p) s->be->upload_f32(&s->ctx, p, dt, h, n);
    return p;
}
static void *up_i32(side *s, const int32_t *h, int64_t n) {
    void *p = dev_alloc(s, n * 4);
    if (p) s->be->to_device(&s->ctx, p, h, (size_t)n * 4);
    return p;
}
static float *down(side *s, const void *p, int64_t n, tr_dtype dt) {
    float *h = malloc((size_t)n * sizeof *h);
    s->be->download_f32(&s->ctx, h, p, dt, n);
    return h;
}
static void release(side *s) {
    for (int i = 0; i < s->nb; i++) s->be->mem.free(s->bufs[i]);
    s->nb = 0;
}

static int failf(tr_parity_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failf(tr_parity_result *res, const char *fmt, ...) {
    if (!res->fail[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(res->fail, sizeof res->fail, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Compares n outputs; frees both. */
static int cmp(tr_parity_result *res, tr_parity_tol tol, const char *what, float *a, float *b, int64_t n,
               const char *na, const char *nb) {
    int rc = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = a[i], y = b[i], bound = tol.abs + tol.rel * fmax(fabs(x), fabs(y));
        double q = fabs(x - y) / bound;
        if (!isfinite(x) || !isfinite(y) || !(q <= 1)) {
            rc = failf(res, "%s[%lld]: %s %.9g, %s %.9g (bound %.3g)", what, (long long)i, na, x, nb, y, bound);
            break;
        }
        if (q > res->worst) {
            res->worst = q;
            snprintf(res->worst_at, sizeof res->worst_at, "%s[%lld]", what, (long long)i);
        }
    }
    res->compared += n;
    free(a);
    free(b);
    return rc;
}

typedef struct inputs {
    tr_dtype dt;
    float *x, *y, *wte, *w_h, *inp_c, *w_mm, *bias, *dout_mm, *dwacc, *dbacc, *qkv, *dout_q, *gu, *dh, *logits,
        *w32, *m, *v, *g;
    int32_t tok[N], tgt[N];
} inputs;

static void make_inputs(inputs *in, tr_dtype dt) {
    in->dt = dt;
    in->x = hrand(N * H, 1);
    in->y = hrand(N * H, 1);
    in->wte = hrand(V * H, 1);
    in->w_h = hrand(H, 1);
    in->inp_c = hrand(N * C, 1);
    in->w_mm = hrand(OC * C, 0.3f);
    in->bias = hrand(OC, 0.3f);
    in->dout_mm = hrand(N * OC, 1);
    in->dwacc = hrand(OC * C, 1);
    in->dbacc = hrand(OC, 1);
    in->qkv = hrand(QKV_N, 1);
    in->dout_q = hrand(Q_N, 1);
    in->gu = hrand(N * 2 * I, 2);
    in->dh = hrand(N * I, 1);
    in->logits = hrand(N * V, 3);
    in->w32 = hrand(N * H, 1);
    in->m = hrand(N * H, 0.1f);
    in->v = hrand(N * H, 0.1f);
    for (int64_t i = 0; i < N * H; i++) in->v[i] = fabsf(in->v[i]);
    in->g = hrand(N * H, 1);
    for (int i = 0; i < N; i++) {
        in->tok[i] = (int32_t)((i * 7 + 3) % V);  /* row 0 and a later row share no token; 3 and 3+V... */
        in->tgt[i] = (int32_t)((i * 13 + 1) % V);
    }
    in->tok[N - 1] = in->tok[0];  /* a repeated token: the embedding backward must sum both rows */
}
static void free_inputs(inputs *in) {
    float **f[] = {&in->x, &in->y, &in->wte, &in->w_h, &in->inp_c, &in->w_mm, &in->bias, &in->dout_mm, &in->dwacc,
                   &in->dbacc, &in->qkv, &in->dout_q, &in->gu, &in->dh, &in->logits, &in->w32, &in->m, &in->v,
                   &in->g};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(*f[i]), *f[i] = NULL;
}

/* Outputs of one op on one side, downloaded to fp32. */
typedef struct outs {
    float *o[4];
    int64_t n[4];
    const char *name[4];
    int k;
} outs;
static void put(outs *o, const char *name, float *h, int64_t n) {
    o->name[o->k] = name;
    o->n[o->k] = n;
    o->o[o->k++] = h;
}

/* Saved tensors a backward op reads, taken from the first backend's forward. */
typedef struct saved {
    float *rstd, *probs, *out_flash, *lse, *out_eager;
} saved;

enum { OP_ADD, OP_EMB_F, OP_EMB_B, OP_RMS_F, OP_RMS_B, OP_MM_F, OP_MM_B, OP_ROPE_F, OP_ROPE_B, OP_AE_F, OP_AE_B,
       OP_AF_F, OP_AF_B, OP_SW_F, OP_SW_B, OP_CE_F, OP_CE_B, OP_ADAMW, OP_SGD, OP_SUMSQ, OP_CONVERT, OP_COUNT };
static const char *const op_names[OP_COUNT] = {
    "add", "embedding_fwd", "embedding_bwd", "rmsnorm_fwd", "rmsnorm_bwd", "matmul_fwd", "matmul_bwd",
    "rope_fwd", "rope_bwd", "attn_eager_fwd", "attn_eager_bwd", "attn_flash_fwd", "attn_flash_bwd",
    "swiglu_fwd", "swiglu_bwd", "ce_fwd", "ce_bwd", "adamw", "sgd", "sumsq", "convert"};

static void run_op(int op, side *s, const inputs *in, const saved *sv, outs *o) {
    const tr_backend *be = s->be;
    tr_backend_ctx *cx = &s->ctx;
    const tr_dtype dt = in->dt;
    memset(o, 0, sizeof *o);
    switch (op) {
    case OP_ADD: {
        void *y = up(s, in->y, N * H, dt);
        be->add(cx, y, up(s, in->x, N * H, dt), N * H, dt);
        put(o, "y", down(s, y, N * H, dt), N * H);
        break;
    }
    case OP_EMB_F: {
        void *out = dev_alloc(s, N * H * tr_dtype_bytes(dt));
        be->embedding_fwd(cx, out, up_i32(s, in->tok, N), up(s, in->wte, V * H, dt), N, H, dt);
        put(o, "out", down(s, out, N * H, dt), N * H);
        break;
    }
    case OP_EMB_B: {
        void *dwte = up(s, in->wte, V * H, dt);  /* accumulates */
        be->embedding_bwd(cx, dwte, up(s, in->x, N * H, dt), up_i32(s, in->tok, N), N, H, dt);
        put(o, "dwte", down(s, dwte, V * H, dt), V * H);
        break;
    }
    case OP_RMS_F: {
        void *out = dev_alloc(s, N * H * tr_dtype_bytes(dt)), *rstd = dev_alloc(s, N * 4);
        be->rmsnorm_fwd(cx, out, rstd, up(s, in->x, N * H, dt), up(s, in->w_h, H, dt), N, H, EPS_NORM, dt);
        put(o, "out", down(s, out, N * H, dt), N * H);
        put(o, "rstd", down(s, rstd, N, TR_F32), N);
        break;
    }
    case OP_RMS_B: {
        void *dinp = up(s, in->y, N * H, dt), *dw = up(s, in->w_h, H, dt);  /* both accumulate */
        be->rmsnorm_bwd(cx, dinp, dw, up(s, in->g, N * H, dt), up(s, in->x, N * H, dt), up(s, in->w_h, H, dt),
                        up(s, sv->rstd, N, TR_F32), N, H, dt);
        put(o, "dinp", down(s, dinp, N * H, dt), N * H);
        put(o, "dw", down(s, dw, H, dt), H);
        break;
    }
    case OP_MM_F: {
        void *out = dev_alloc(s, N * OC * tr_dtype_bytes(dt));
        be->matmul_fwd(cx, out, up(s, in->inp_c, N * C, dt), up(s, in->w_mm, OC * C, dt), up(s, in->bias, OC, dt),
                       N, C, OC, dt);
        put(o, "out", down(s, out, N * OC, dt), N * OC);
        break;
    }
    case OP_MM_B: {
        void *dinp = dev_alloc(s, N * C * tr_dtype_bytes(dt));
        void *dw = up(s, in->dwacc, OC * C, dt), *db = up(s, in->dbacc, OC, dt);
        be->matmul_bwd(cx, dinp, dw, db, up(s, in->dout_mm, N * OC, dt), up(s, in->inp_c, N * C, dt),
                       up(s, in->w_mm, OC * C, dt), N, C, OC, dt);
        put(o, "dinp", down(s, dinp, N * C, dt), N * C);
        put(o, "dw", down(s, dw, OC * C, dt), OC * C);
        put(o, "dbias", down(s, db, OC, dt), OC);
        break;
    }
    case OP_ROPE_F:
    case OP_ROPE_B: {
        void *q = up(s, in->qkv, QKV_N, dt);
        (op == OP_ROPE_F ? be->rope_fwd : be->rope_bwd)(cx, q, B, T, NH, NKV, HD, THETA, dt);
        put(o, "qkv", down(s, q, QKV_N, dt), QKV_N);
        break;
    }
    case OP_AE_F: {
        void *out = dev_alloc(s, Q_N * tr_dtype_bytes(dt)), *p = dev_alloc(s, P_N * tr_dtype_bytes(dt));
        be->attn_eager_fwd(cx, out, p, up(s, in->qkv, QKV_N, dt), B, T, NH, NKV, HD, dt);
        put(o, "out", down(s, out, Q_N, dt), Q_N);
        put(o, "probs", down(s, p, P_N, dt), P_N);
        break;
    }
    case OP_AE_B: {
        void *dq = dev_alloc(s, QKV_N * tr_dtype_bytes(dt)), *dp = dev_alloc(s, P_N * tr_dtype_bytes(dt));
        be->attn_eager_bwd(cx, dq, dp, up(s, in->dout_q, Q_N, dt), up(s, in->qkv, QKV_N, dt),
                           up(s, sv->probs, P_N, dt), B, T, NH, NKV, HD, dt);
        put(o, "dqkv", down(s, dq, QKV_N, dt), QKV_N);
        break;
    }
    case OP_AF_F: {
        void *out = dev_alloc(s, Q_N * tr_dtype_bytes(dt)), *lse = dev_alloc(s, LSE_N * 4);
        be->attn_flash_fwd(cx, out, lse, up(s, in->qkv, QKV_N, dt), B, T, NH, NKV, HD, dt);
        put(o, "out", down(s, out, Q_N, dt), Q_N);
        put(o, "lse", down(s, lse, LSE_N, TR_F32), LSE_N);
        break;
    }
    case OP_AF_B: {
        void *dq = dev_alloc(s, QKV_N * tr_dtype_bytes(dt));
        be->attn_flash_bwd(cx, dq, up(s, in->dout_q, Q_N, dt), up(s, in->qkv, QKV_N, dt),
                           up(s, sv->out_flash, Q_N, dt), up(s, sv->lse, LSE_N, TR_F32), B, T, NH, NKV, HD, dt);
        put(o, "dqkv", down(s, dq, QKV_N, dt), QKV_N);
        break;
    }
    case OP_SW_F: {
        void *h = dev_alloc(s, N * I * tr_dtype_bytes(dt));
        be->swiglu_fwd(cx, h, up(s, in->gu, N * 2 * I, dt), N, I, dt);
        put(o, "hact", down(s, h, N * I, dt), N * I);
        break;
    }
    case OP_SW_B: {
        void *d = dev_alloc(s, N * 2 * I * tr_dtype_bytes(dt));
        be->swiglu_bwd(cx, d, up(s, in->dh, N * I, dt), up(s, in->gu, N * 2 * I, dt), N, I, dt);
        put(o, "dgu", down(s, d, N * 2 * I, dt), N * 2 * I);
        break;
    }
    case OP_CE_F: {
        void *l = dev_alloc(s, N * 4);
        be->ce_fwd(cx, l, up(s, in->logits, N * V, dt), up_i32(s, in->tgt, N), N, V, dt);
        put(o, "losses", down(s, l, N, TR_F32), N);
        break;
    }
    case OP_CE_B: {
        void *z = up(s, in->logits, N * V, dt);
        be->ce_bwd(cx, z, up_i32(s, in->tgt, N), N, V, 0.25f, dt);
        put(o, "dlogits", down(s, z, N * V, dt), N * V);
        break;
    }
    case OP_ADAMW:
    case OP_SGD: {
        const int64_t n = N * H;
        float *w = up(s, in->w32, n, TR_F32), *m = up(s, in->m, n, TR_F32), *v = up(s, in->v, n, TR_F32);
        void *wout = dev_alloc(s, n * tr_dtype_bytes(dt));
        tr_opt_args a = {.lr = 0.01f, .weight_decay = 0.1f, .grad_scale = 0.5f, .t = 3};
        if (op == OP_ADAMW) be->adamw(cx, w, wout, dt, up(s, in->g, n, dt), dt, m, v, n, &a);
        else be->sgd(cx, w, wout, dt, up(s, in->g, n, dt), dt, n, &a);
        put(o, "w", down(s, w, n, TR_F32), n);
        put(o, "wout", down(s, wout, n, dt), n);
        if (op == OP_ADAMW) {
            put(o, "m", down(s, m, n, TR_F32), n);
            put(o, "v", down(s, v, n, TR_F32), n);
        }
        break;
    }
    case OP_SUMSQ: {
        float *h = malloc(sizeof *h);
        h[0] = (float)be->sumsq(cx, up(s, in->x, N * H, dt), N * H, dt);
        put(o, "sumsq", h, 1);
        break;
    }
    case OP_CONVERT: {
        /* fp32 -> dt -> fp32 through the device: both must round alike. */
        void *a = up(s, in->x, N * H, TR_F32), *d = dev_alloc(s, N * H * tr_dtype_bytes(dt));
        be->convert(cx, d, dt, a, TR_F32, N * H);
        put(o, "converted", down(s, d, N * H, dt), N * H);
        break;
    }
    }
}

static int open_side(side *s, const tr_backend *be, tr_parity_result *res) {
    memset(s, 0, sizeof *s);
    s->be = be;
    char err[256];
    if (be->open(&s->ctx, 0, err, sizeof err)) return failf(res, "%s: %s", be->name, err);
    return 0;
}

int tr_parity_run(const tr_backend *a, const tr_backend *b, tr_dtype dt, tr_parity_tol tol, tr_parity_result *res) {
    memset(res, 0, sizeof *res);
    side sa, sb;
    if (open_side(&sa, a, res)) return -1;
    if (open_side(&sb, b, res)) {
        a->close(&sa.ctx);
        return -1;
    }
    inputs in;
    make_inputs(&in, dt);
    saved sv = {0};
    int rc = 0;
    for (int op = 0; op < OP_COUNT && !rc; op++) {
        outs oa, ob;
        run_op(op, &sa, &in, &sv, &oa);
        run_op(op, &sb, &in, &sv, &ob);
        if (a->sync(&sa.ctx) || b->sync(&sb.ctx))
            rc = failf(res, "%s: %s", op_names[op], sa.ctx.status ? sa.ctx.msg : sb.ctx.msg);
        res->ops++;
        /* Keep the first backend's forward outputs for the backward ops. */
        if (op == OP_RMS_F) sv.rstd = oa.o[1], oa.o[1] = malloc(N * sizeof(float)), memcpy(oa.o[1], sv.rstd, N * sizeof(float));
        if (op == OP_AE_F) sv.probs = oa.o[1], oa.o[1] = malloc(P_N * sizeof(float)), memcpy(oa.o[1], sv.probs, P_N * sizeof(float));
        if (op == OP_AF_F) {
            sv.out_flash = malloc(Q_N * sizeof(float));
            memcpy(sv.out_flash, oa.o[0], Q_N * sizeof(float));
            sv.lse = malloc(LSE_N * sizeof(float));
            memcpy(sv.lse, oa.o[1], LSE_N * sizeof(float));
        }
        if (op == OP_AE_F) {
            sv.out_eager = malloc(Q_N * sizeof(float));
            memcpy(sv.out_eager, oa.o[0], Q_N * sizeof(float));
        }
        for (int k = 0; k < oa.k; k++) {
            char what[96];
            snprintf(what, sizeof what, "%s %s %s", op_names[op], dt == TR_BF16 ? "bf16" : "fp32", oa.name[k]);
            if (!rc) rc = cmp(res, tol, what, oa.o[k], ob.o[k], oa.n[k], a->name, b->name);
            else free(oa.o[k]), free(ob.o[k]);
        }
        release(&sa);
        release(&sb);
    }
    /* Flash and eager attention compute the same function: the first
     * backend's two outputs must agree too. */
    if (!rc && sv.out_flash && sv.out_eager) {
        float *fl = malloc(Q_N * sizeof(float)), *ea = malloc(Q_N * sizeof(float));
        memcpy(fl, sv.out_flash, Q_N * sizeof(float));
        memcpy(ea, sv.out_eager, Q_N * sizeof(float));
        rc = cmp(res, tol, "attn flash vs eager out", fl, ea, Q_N, "flash", "eager");
    }
    free(sv.rstd), free(sv.probs), free(sv.out_flash), free(sv.lse), free(sv.out_eager);
    free_inputs(&in);
    a->close(&sa.ctx);
    b->close(&sb.ctx);
    return rc;
}

/* ---------------- finite differences through one backend ---------------- */

/* Forward of one op as a function of one input x (host fp32, n): returns
 * sum_i R_i * out_i, computed on the backend. */
typedef double (*fd_fn)(side *s, const float *x, const float *R);

#define FD_EPS 1e-2    /* central differences: error O(eps^2) times the third derivative */
#define FD_ABS 2e-3
#define FD_REL 1e-2

static double dot_free(float *a, const float *R, int64_t n) {
    double d = 0;
    for (int64_t i = 0; i < n; i++) d += (double)a[i] * R[i];
    free(a);
    return d;
}

static double f_rms(side *s, const float *x, const float *R) {
    void *out = dev_alloc(s, N * H * 4), *rstd = dev_alloc(s, N * 4);
    float w[H];
    for (int j = 0; j < H; j++) w[j] = 0.5f + 0.02f * (float)j;
    s->be->rmsnorm_fwd(&s->ctx, out, rstd, up(s, x, N * H, TR_F32), up(s, w, H, TR_F32), N, H, EPS_NORM, TR_F32);
    return dot_free(down(s, out, N * H, TR_F32), R, N * H);
}
static float *g_rms(side *s, const float *x, const float *R) {
    void *out = dev_alloc(s, N * H * 4), *rstd = dev_alloc(s, N * 4), *dx = dev_alloc(s, N * H * 4),
         *dw = dev_alloc(s, H * 4);
    float w[H];
    for (int j = 0; j < H; j++) w[j] = 0.5f + 0.02f * (float)j;
    void *xd = up(s, x, N * H, TR_F32), *wd = up(s, w, H, TR_F32);
    s->be->rmsnorm_fwd(&s->ctx, out, rstd, xd, wd, N, H, EPS_NORM, TR_F32);
    s->be->rmsnorm_bwd(&s->ctx, dx, dw, up(s, R, N * H, TR_F32), xd, wd, rstd, N, H, TR_F32);
    return down(s, dx, N * H, TR_F32);
}
static double f_sw(side *s, const float *x, const float *R) {
    void *h = dev_alloc(s, N * I * 4);
    s->be->swiglu_fwd(&s->ctx, h, up(s, x, N * 2 * I, TR_F32), N, I, TR_F32);
    return dot_free(down(s, h, N * I, TR_F32), R, N * I);
}
static float *g_sw(side *s, const float *x, const float *R) {
    void *d = dev_alloc(s, N * 2 * I * 4);
    s->be->swiglu_bwd(&s->ctx, d, up(s, R, N * I, TR_F32), up(s, x, N * 2 * I, TR_F32), N, I, TR_F32);
    return down(s, d, N * 2 * I, TR_F32);
}
static float mm_w[OC * C];
static double f_mm(side *s, const float *x, const float *R) {
    void *out = dev_alloc(s, N * OC * 4);
    s->be->matmul_fwd(&s->ctx, out, up(s, x, N * C, TR_F32), up(s, mm_w, OC * C, TR_F32), NULL, N, C, OC, TR_F32);
    return dot_free(down(s, out, N * OC, TR_F32), R, N * OC);
}
static float *g_mm(side *s, const float *x, const float *R) {
    void *dx = dev_alloc(s, N * C * 4);
    s->be->matmul_bwd(&s->ctx, dx, NULL, NULL, up(s, R, N * OC, TR_F32), up(s, x, N * C, TR_F32),
                      up(s, mm_w, OC * C, TR_F32), N, C, OC, TR_F32);
    return down(s, dx, N * C, TR_F32);
}
static double f_rope(side *s, const float *x, const float *R) {
    void *q = up(s, x, QKV_N, TR_F32);
    s->be->rope_fwd(&s->ctx, q, B, T, NH, NKV, HD, THETA, TR_F32);
    return dot_free(down(s, q, QKV_N, TR_F32), R, QKV_N);
}
static float *g_rope(side *s, const float *x, const float *R) {
    (void)x;
    void *d = up(s, R, QKV_N, TR_F32);
    s->be->rope_bwd(&s->ctx, d, B, T, NH, NKV, HD, THETA, TR_F32);
    return down(s, d, QKV_N, TR_F32);
}
static double f_attn(side *s, const float *x, const float *R, int flash) {
    void *out = dev_alloc(s, Q_N * 4), *aux = dev_alloc(s, (flash ? LSE_N : P_N) * 4);
    void *q = up(s, x, QKV_N, TR_F32);
    if (flash) s->be->attn_flash_fwd(&s->ctx, out, aux, q, B, T, NH, NKV, HD, TR_F32);
    else s->be->attn_eager_fwd(&s->ctx, out, aux, q, B, T, NH, NKV, HD, TR_F32);
    return dot_free(down(s, out, Q_N, TR_F32), R, Q_N);
}
static float *g_attn(side *s, const float *x, const float *R, int flash) {
    void *out = dev_alloc(s, Q_N * 4), *aux = dev_alloc(s, (flash ? LSE_N : P_N) * 4);
    void *dq = dev_alloc(s, QKV_N * 4), *q = up(s, x, QKV_N, TR_F32), *dout = up(s, R, Q_N, TR_F32);
    if (flash) {
        s->be->attn_flash_fwd(&s->ctx, out, aux, q, B, T, NH, NKV, HD, TR_F32);
        s->be->attn_flash_bwd(&s->ctx, dq, dout, q, out, aux, B, T, NH, NKV, HD, TR_F32);
    } else {
        void *dp = dev_alloc(s, P_N * 4);
        s->be->attn_eager_fwd(&s->ctx, out, aux, q, B, T, NH, NKV, HD, TR_F32);
        s->be->attn_eager_bwd(&s->ctx, dq, dp, dout, q, aux, B, T, NH, NKV, HD, TR_F32);
    }
    return down(s, dq, QKV_N, TR_F32);
}
static double f_af(side *s, const float *x, const float *R) { return f_attn(s, x, R, 1); }
static float *g_af(side *s, const float *x, const float *R) { return g_attn(s, x, R, 1); }
static double f_ae(side *s, const float *x, const float *R) { return f_attn(s, x, R, 0); }
static float *g_ae(side *s, const float *x, const float *R) { return g_attn(s, x, R, 0); }
static const int32_t ce_tgt[N] = {3, 0, 49, 17, 17, 8, 30};
/* The loss is a scalar per row: R weighs the rows, and the backward's scale
 * can carry only one weight, so this objective is the plain sum (R unused). */
static double f_ce(side *s, const float *x, const float *R) {
    (void)R;
    void *l = dev_alloc(s, N * 4);
    s->be->ce_fwd(&s->ctx, l, up(s, x, N * V, TR_F32), up_i32(s, ce_tgt, N), N, V, TR_F32);
    float *h = down(s, l, N, TR_F32);
    double sum = 0;
    for (int i = 0; i < N; i++) sum += h[i];
    free(h);
    return sum;
}
static float *g_ce(side *s, const float *x, const float *R) {
    (void)R;
    void *z = up(s, x, N * V, TR_F32);
    s->be->ce_bwd(&s->ctx, z, up_i32(s, ce_tgt, N), N, V, 1.0f, TR_F32);
    return down(s, z, N * V, TR_F32);
}

typedef struct fd_case {
    const char *name;
    int64_t n_in, n_out;
    float scale;
    fd_fn f;
    float *(*grad)(side *s, const float *x, const float *R);
} fd_case;

int tr_parity_fd(const tr_backend *be, tr_parity_result *res) {
    memset(res, 0, sizeof *res);
    side s;
    if (open_side(&s, be, res)) return -1;
    for (int i = 0; i < OC * C; i++) mm_w[i] = 0.3f * frand();
    const fd_case cases[] = {
        {"rmsnorm_bwd dinp", N * H, N * H, 1, f_rms, g_rms},
        {"swiglu_bwd dgu", N * 2 * I, N * I, 2, f_sw, g_sw},
        {"matmul_bwd dinp", N * C, N * OC, 1, f_mm, g_mm},
        {"rope_bwd dqkv", QKV_N, QKV_N, 1, f_rope, g_rope},
        {"attn_flash_bwd dqkv", QKV_N, Q_N, 1, f_af, g_af},
        {"attn_eager_bwd dqkv", QKV_N, Q_N, 1, f_ae, g_ae},
        {"ce_bwd dlogits", N * V, N, 3, f_ce, g_ce},
    };
    int rc = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0] && !rc; c++) {
        const fd_case *k = &cases[c];
        float *x = hrand(k->n_in, k->scale), *R = hrand(k->n_out, 1), *xp = malloc((size_t)k->n_in * 4),
              *xm = malloc((size_t)k->n_in * 4);
        float *g = k->grad(&s, x, R);
        /* Three random directions: each checks every component at once. */
        for (int dir = 0; dir < 3 && !rc; dir++) {
            float *d = hrand(k->n_in, 1);
            for (int64_t i = 0; i < k->n_in; i++) xp[i] = x[i] + (float)FD_EPS * d[i], xm[i] = x[i] - (float)FD_EPS * d[i];
            double num = (k->f(&s, xp, R) - k->f(&s, xm, R)) / (2 * FD_EPS), ana = 0, mag = 0;
            for (int64_t i = 0; i < k->n_in; i++) ana += (double)g[i] * d[i], mag += fabs((double)g[i] * d[i]);
            /* Rounding of the fp32 sums scales with the sum of |terms|, not their total. */
            if (!(fabs(ana - num) <= FD_ABS * (1 + mag) + FD_REL * fabs(num)))
                rc = failf(res, "%s on %s: analytic %.6g, finite difference %.6g (direction %d)", k->name, be->name,
                           ana, num, dir);
            res->compared++;
            free(d);
            release(&s);
        }
        res->ops++;
        free(x), free(R), free(xp), free(xm), free(g);
        release(&s);
    }
    if (!rc && be->sync(&s.ctx)) rc = failf(res, "%s: %s", be->name, s.ctx.msg);
    be->close(&s.ctx);
    return rc;
}
