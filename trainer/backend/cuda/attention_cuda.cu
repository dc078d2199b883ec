/* Causal attention on the GPU, eager and flash, forward and backward:
 * one thread per query row (forward, dq) or key row (dk, dv), each running
 * the row body of attn_rows.h, which the tests run on the CPU against the
 * reference backend (tests/trainer_cuda_rows.c). Each kernel is compiled for
 * head dims 64 and 128 (the accumulators then live in registers) and for any
 * other up to TR_MAX_HEAD_DIM, in fp32 and bf16.
 *
 * STATUS: compiled for sm_80/sm_90, never run (no GPU was lent while it was
 * written); `make test-gpu` compares it with the CPU backend.
 *
 * This is the simple correct version, not a fast one: neighbouring threads
 * are neighbouring query positions of one head, so they read the same key
 * and value rows (broadcast loads through the L1), but nothing is staged in
 * shared memory and the matrix units are not used. Flash's backward
 * precomputes D_t = do_t . o_t once per row into the context's workspace
 * when it fits (the workspace is idle between matmuls on the one stream),
 * and recomputes it per key otherwise. */
#include "cuda_internal.h"
extern "C" {
#include "config.h"
}
#include "attn_rows.h"
#include "check.h"

namespace trcu {
namespace {

/* The kernels' prologue: the row index (return past the last), the head dim
 * as a constant where the template fixes it, the dtype as a constant. */
#define AR_PROLOGUE(rows)                                              \
    const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;  \
    if (r >= (rows)) return;                                           \
    if (HD > 0) s.hd = HD;                                             \
    const tr_dtype dt = (tr_dtype)DT
#define AR_ACC(name) float name[HD > 0 ? HD : TR_MAX_HEAD_DIM]

template <int HD, int DT>
__global__ void k_flash_fwd(void *out, float *lse, const void *qkv, ar_shape s, int64_t rows) {
    AR_PROLOGUE(rows);
    AR_ACC(acc);
    ar_flash_fwd_row(out, lse, qkv, s, r, acc, dt);
}
template <int HD, int DT>
__global__ void k_flash_d(float *dD, const void *dout, const void *o, ar_shape s, int64_t rows) {
    AR_PROLOGUE(rows);
    ar_flash_d_row(dD, dout, o, s, r, dt);
}
template <int HD, int DT>
__global__ void k_flash_dq(void *dqkv, const void *dout, const void *qkv, const void *o, const float *lse, ar_shape s,
                           int64_t rows) {
    AR_PROLOGUE(rows);
    AR_ACC(acc);
    ar_flash_bwd_q_row(dqkv, dout, qkv, o, lse, s, r, acc, dt);
}
template <int HD, int DT>
__global__ void k_flash_dkv(void *dqkv, const void *dout, const void *qkv, const void *o, const float *lse,
                            const float *dD, ar_shape s, int64_t rows) {
    AR_PROLOGUE(rows);
    AR_ACC(ak);
    AR_ACC(av);
    ar_flash_bwd_kv_row(dqkv, dout, qkv, o, lse, dD, s, r, ak, av, dt);
}
template <int HD, int DT>
__global__ void k_eager_fwd(void *out, void *probs, const void *qkv, ar_shape s, int64_t rows) {
    AR_PROLOGUE(rows);
    AR_ACC(acc);
    ar_eager_fwd_row(out, probs, qkv, s, r, acc, dt);
}
template <int HD, int DT>
__global__ void k_eager_ds(void *dprobs, const void *dout, const void *qkv, const void *probs, ar_shape s,
                           int64_t rows) {
    AR_PROLOGUE(rows);
    ar_eager_bwd_ds_row(dprobs, dout, qkv, probs, s, r, dt);
}
template <int HD, int DT>
__global__ void k_eager_dq(void *dqkv, const void *dprobs, const void *qkv, ar_shape s, int64_t rows) {
    AR_PROLOGUE(rows);
    AR_ACC(acc);
    ar_eager_bwd_q_row(dqkv, dprobs, qkv, s, r, acc, dt);
}
template <int HD, int DT>
__global__ void k_eager_dkv(void *dqkv, const void *dprobs, const void *dout, const void *qkv, const void *probs,
                            ar_shape s, int64_t rows) {
    AR_PROLOGUE(rows);
    AR_ACC(ak);
    AR_ACC(av);
    ar_eager_bwd_kv_row(dqkv, dprobs, dout, qkv, probs, s, r, ak, av, dt);
}

/* Launches KERNEL<HD, DT> over `rows` rows with the head dim and dtype of
 * s and dt picked among the instances; records a launch error in ctx. */
#define AR_LAUNCH_DT(KERNEL, DT, rows, ctx, s, ...)                                                    \
    do {                                                                                               \
        const unsigned nb_ = row_blocks(rows);                                                         \
        cudaStream_t st_ = stream_of(ctx);                                                             \
        if ((s).hd == 64) KERNEL<64, DT><<<nb_, kRowThreads, 0, st_>>>(__VA_ARGS__, s, rows);          \
        else if ((s).hd == 128) KERNEL<128, DT><<<nb_, kRowThreads, 0, st_>>>(__VA_ARGS__, s, rows);   \
        else KERNEL<0, DT><<<nb_, kRowThreads, 0, st_>>>(__VA_ARGS__, s, rows);                        \
    } while (0)
#define AR_LAUNCH(KERNEL, rows, ctx, s, dt, ...)                                         \
    do {                                                                                 \
        if ((rows) <= 0) break;                                                          \
        if ((dt) == TR_BF16) AR_LAUNCH_DT(KERNEL, (int)TR_BF16, rows, ctx, s, __VA_ARGS__); \
        else AR_LAUNCH_DT(KERNEL, (int)TR_F32, rows, ctx, s, __VA_ARGS__);               \
        TR_CUDA_LAUNCHED(ctx);                                                           \
    } while (0)

/* The shape, refused (recorded in ctx) past what the row bodies hold. */
bool shape_ok(tr_backend_ctx *ctx, ar_shape s) {
    if (s.hd > 0 && s.hd <= TR_MAX_HEAD_DIM && s.nkv > 0 && s.nh % s.nkv == 0) return true;
    tr_backend_fail(ctx, "attention: head dim %lld (at most %d) or heads %lld/%lld not supported", (long long)s.hd,
                    TR_MAX_HEAD_DIM, (long long)s.nh, (long long)s.nkv);
    return false;
}

}  // namespace

void attn_flash_fwd(tr_backend_ctx *ctx, void *out, float *lse, const void *qkv, int64_t B, int64_t T, int64_t nh,
                    int64_t nkv, int64_t hd, tr_dtype dt) {
    const ar_shape s = {B, T, nh, nkv, hd};
    if (!shape_ok(ctx, s)) return;
    AR_LAUNCH(k_flash_fwd, B * nh * T, ctx, s, dt, out, lse, qkv);
}

void attn_flash_bwd(tr_backend_ctx *ctx, void *dqkv, const void *dout, const void *qkv, const void *out,
                    const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    const ar_shape s = {B, T, nh, nkv, hd};
    if (!shape_ok(ctx, s)) return;
    const int64_t qrows = B * nh * T;
    float *dD = (size_t)qrows * sizeof(float) <= ctx->workspace_bytes ? static_cast<float *>(ctx->workspace) : nullptr;
    if (dD) AR_LAUNCH(k_flash_d, qrows, ctx, s, dt, dD, dout, out);
    AR_LAUNCH(k_flash_dq, qrows, ctx, s, dt, dqkv, dout, qkv, out, lse);
    AR_LAUNCH(k_flash_dkv, B * nkv * T, ctx, s, dt, dqkv, dout, qkv, out, lse, static_cast<const float *>(dD));
}

void attn_eager_fwd(tr_backend_ctx *ctx, void *out, void *probs, const void *qkv, int64_t B, int64_t T, int64_t nh,
                    int64_t nkv, int64_t hd, tr_dtype dt) {
    const ar_shape s = {B, T, nh, nkv, hd};
    if (!shape_ok(ctx, s)) return;
    AR_LAUNCH(k_eager_fwd, B * nh * T, ctx, s, dt, out, probs, qkv);
}

void attn_eager_bwd(tr_backend_ctx *ctx, void *dqkv, void *dprobs, const void *dout, const void *qkv,
                    const void *probs, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    const ar_shape s = {B, T, nh, nkv, hd};
    if (!shape_ok(ctx, s)) return;
    AR_LAUNCH(k_eager_ds, B * nh * T, ctx, s, dt, dprobs, dout, qkv, probs);
    AR_LAUNCH(k_eager_dq, B * nh * T, ctx, s, dt, dqkv, dprobs, qkv);
    AR_LAUNCH(k_eager_dkv, B * nkv * T, ctx, s, dt, dqkv, dprobs, dout, qkv, probs);
}

}  // namespace trcu
