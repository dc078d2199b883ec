/* make test-gpu: the op harness (tests/trainer_parity.c) CUDA against CPU,
 * in fp32 and bf16, finite differences through the CUDA backend, and the
 * shapes the harness's small cases do not reach: attention at head dims 64
 * and 128 (the kernels' register instances) over several key tiles, and
 * matmuls large and aligned enough for cuBLASLt's tensor-core algorithms
 * next to an odd one.
 * Exit 0 when all agree, 1 on a disagreement, 2 when it cannot run (no CUDA
 * build, no GPU, an op not written yet), always with one line saying which.
 * Tolerances are those of tests/trainer_backend_parity.c.
 *
 * STATUS: never run (no GPU was lent while it was written). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "trainer_parity.h"

static const tr_parity_tol fp32_tol = {1e-5, 1e-4}, bf16_tol = {1.0 / 128, 1.0 / 64};

/* One backend's context and the buffers it allocated. */
typedef struct side {
    const tr_backend *be;
    tr_backend_ctx ctx;
    void *buf[16];
    int nb;
} side;

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float *hrand(int64_t n, float scale) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; v && i < n; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        v[i] = scale * (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    return v;
}
static void *dalloc(side *s, int64_t n, tr_dtype dt) {
    void *p = s->be->mem.alloc((size_t)(n * tr_dtype_bytes(dt)));
    if (p && s->nb < 16) s->buf[s->nb++] = p;
    return p;
}
static void *upload(side *s, const float *h, int64_t n, tr_dtype dt) {
    void *p = dalloc(s, n, dt);
    if (p) s->be->upload_f32(&s->ctx, p, dt, h, n);
    return p;
}
static void release(side *s) {
    for (int i = 0; i < s->nb; i++) s->be->mem.free(s->buf[i]);
    s->nb = 0;
}

/* Downloads n values of p from both sides and compares them; 0 or -1 (printed). */
static int compare(side *g, const void *pg, side *c, const void *pc, int64_t n, tr_dtype dt, const char *what) {
    const tr_parity_tol tol = dt == TR_BF16 ? bf16_tol : fp32_tol;
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    int rc = 0;
    g->be->download_f32(&g->ctx, a, pg, dt, n);
    c->be->download_f32(&c->ctx, b, pc, dt, n);
    if (g->be->sync(&g->ctx)) rc = -1, fprintf(stderr, "test-gpu: %s: %s\n", what, g->ctx.msg);
    for (int64_t i = 0; !rc && i < n; i++) {
        double bound = tol.abs + tol.rel * fmax(fabs(a[i]), fabs(b[i]));
        if (!(fabs((double)a[i] - b[i]) <= bound))
            rc = -1, fprintf(stderr, "test-gpu: %s[%lld]: cuda %.9g, cpu %.9g (bound %.3g)\n", what, (long long)i,
                             a[i], b[i], bound);
    }
    free(a), free(b);
    return rc;
}

/* Flash and eager, forward and backward, on both sides at one shape. */
static int attention_case(side *g, side *c, int64_t hd, tr_dtype dt) {
    const int64_t B = 2, T = 130, nh = 8, nkv = 2, nq = B * T * (nh + 2 * nkv) * hd, no = B * T * nh * hd;
    const int64_t nl = B * nh * T, np = B * nh * T * T;
    float *qkv = hrand(nq, 2.0f), *dout = hrand(no, 1.0f);
    side *sd[2] = {g, c};
    void *o[2][6];
    for (int k = 0; k < 2; k++) {
        side *s = sd[k];
        void *q = upload(s, qkv, nq, dt), *d = upload(s, dout, no, dt);
        void *of = dalloc(s, no, dt), *lse = dalloc(s, nl, TR_F32), *dqf = dalloc(s, nq, dt);
        void *oe = dalloc(s, no, dt), *p = dalloc(s, np, dt), *dp = dalloc(s, np, dt), *dqe = dalloc(s, nq, dt);
        s->be->attn_flash_fwd(&s->ctx, of, lse, q, B, T, nh, nkv, hd, dt);
        s->be->attn_flash_bwd(&s->ctx, dqf, d, q, of, lse, B, T, nh, nkv, hd, dt);
        s->be->attn_eager_fwd(&s->ctx, oe, p, q, B, T, nh, nkv, hd, dt);
        s->be->attn_eager_bwd(&s->ctx, dqe, dp, d, q, p, B, T, nh, nkv, hd, dt);
        o[k][0] = of, o[k][1] = lse, o[k][2] = dqf, o[k][3] = oe, o[k][4] = p, o[k][5] = dqe;
    }
    char w[80];
    const char *names[6] = {"flash out", "flash lse", "flash dqkv", "eager out", "eager probs", "eager dqkv"};
    const int64_t ns[6] = {no, nl, nq, no, np, nq};
    int rc = 0;
    for (int i = 0; i < 6 && !rc; i++) {
        snprintf(w, sizeof w, "hd %lld %s %s", (long long)hd, dt == TR_BF16 ? "bf16" : "fp32", names[i]);
        rc = compare(g, o[0][i], c, o[1][i], ns[i], i == 1 ? TR_F32 : dt, w);
    }
    release(g), release(c);
    free(qkv), free(dout);
    return rc;
}

/* out = inp w^T + bias and its backward at (n, c, oc) on both sides. */
static int matmul_case(side *g, side *c, int64_t n, int64_t cc, int64_t oc, tr_dtype dt) {
    float *x = hrand(n * cc, 1.0f), *w = hrand(oc * cc, 0.1f), *b = hrand(oc, 0.1f), *d = hrand(n * oc, 1.0f);
    float *acc = hrand(oc * cc, 0.01f), *bacc = hrand(oc, 0.01f);
    side *sd[2] = {g, c};
    void *o[2][4];
    for (int k = 0; k < 2; k++) {
        side *s = sd[k];
        void *xi = upload(s, x, n * cc, dt), *wi = upload(s, w, oc * cc, dt), *bi = upload(s, b, oc, dt);
        void *di = upload(s, d, n * oc, dt), *dw = upload(s, acc, oc * cc, dt), *db = upload(s, bacc, oc, dt);
        void *out = dalloc(s, n * oc, dt), *dx = dalloc(s, n * cc, dt);
        s->be->matmul_fwd(&s->ctx, out, xi, wi, bi, n, cc, oc, dt);
        s->be->matmul_bwd(&s->ctx, dx, dw, db, di, xi, wi, n, cc, oc, dt);
        o[k][0] = out, o[k][1] = dx, o[k][2] = dw, o[k][3] = db;
    }
    const char *names[4] = {"out", "dinp", "dw", "dbias"};
    const int64_t ns[4] = {n * oc, n * cc, oc * cc, oc};
    int rc = 0;
    for (int i = 0; i < 4 && !rc; i++) {
        char what[96];
        snprintf(what, sizeof what, "matmul %lldx%lldx%lld %s %s", (long long)n, (long long)cc, (long long)oc,
                 dt == TR_BF16 ? "bf16" : "fp32", names[i]);
        rc = compare(g, o[0][i], c, o[1][i], ns[i], dt, what);
    }
    release(g), release(c);
    free(x), free(w), free(b), free(d), free(acc), free(bacc);
    return rc;
}

/* The model-sized shapes, CUDA against CPU. 0 or -1 (printed). */
static int shapes(const tr_backend *cu) {
    side g = {.be = cu}, c = {.be = tr_backend_cpu()};
    char err[256];
    if (cu->open(&g.ctx, 0, err, sizeof err) || c.be->open(&c.ctx, 0, err, sizeof err))
        return fprintf(stderr, "test-gpu: %s\n", err), -1;
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        const tr_dtype dt = k ? TR_BF16 : TR_F32;
        rc = attention_case(&g, &c, 64, dt) || attention_case(&g, &c, 128, dt) ||
             matmul_case(&g, &c, 257, 512, 384, dt) || matmul_case(&g, &c, 33, 36, 44, dt) ? -1 : 0;
    }
    cu->close(&g.ctx);
    c.be->close(&c.ctx);
    if (!rc) printf("test-gpu: head dims 64 and 128 over 5 key tiles, matmuls 257x512x384 and 33x36x44 agree\n");
    return rc;
}

int main(void) {
    const tr_backend *cu = tr_backend_cuda();
    char err[256];
    if (!cu) {
        fprintf(stderr, "test-gpu: needs a GPU and a CUDA build: this build has no CUDA backend (nvcc not found)\n");
        return 2;
    }
    if (cu->probe && cu->probe(err, sizeof err)) {
        fprintf(stderr, "test-gpu: needs a GPU: %s\n", err);
        return 2;
    }
    const char *missing = tr_backend_missing_op(cu);
    if (missing) {
        fprintf(stderr, "test-gpu: the CUDA backend has no %s yet: nothing to compare\n", missing);
        return 2;
    }
    tr_parity_result r;
    if (tr_parity_run(cu, tr_backend_cpu(), TR_F32, fp32_tol, &r)) return fprintf(stderr, "test-gpu: %s\n", r.fail), 1;
    printf("test-gpu: fp32 %d ops, %lld values, worst %.3f of tolerance at %s\n", r.ops, (long long)r.compared,
           r.worst, r.worst_at);
    if (tr_parity_run(cu, tr_backend_cpu(), TR_BF16, bf16_tol, &r)) return fprintf(stderr, "test-gpu: %s\n", r.fail), 1;
    printf("test-gpu: bf16 %d ops, %lld values, worst %.3f of tolerance at %s\n", r.ops, (long long)r.compared,
           r.worst, r.worst_at);
    if (tr_parity_fd(cu, &r)) return fprintf(stderr, "test-gpu: %s\n", r.fail), 1;
    printf("test-gpu: finite differences of %d backward ops agree\n", r.ops);
    return shapes(cu) ? 1 : 0;
}
