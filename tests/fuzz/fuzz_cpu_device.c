/* libFuzzer target: the CPU device profile reader (estimator/ledger/cpu_device.c),
 * a file a user may replace through FTEST_DATA_DIR. Whatever it accepts must
 * price ops in finite, positive time: every rate positive and finite, every
 * barrier time finite and not negative. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu_device.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    est_cpu_device d;
    char err[256];
    if (est_cpu_device_parse((const char *)data, size, &d, err, sizeof err) < 0) return 0;
    const double rates[] = {d.gemm_fp32_flops_per_s, d.gemm_bf16_flops_per_s, d.memory_bytes_per_s,
                            d.gemm_fp32_flops_per_s_1t, d.gemm_bf16_flops_per_s_1t, d.memory_bytes_per_s_1t,
                            d.threads};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (!(rates[i] > 0) || !isfinite(rates[i])) abort();
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < EST_CPU_SEQS; i++) {
            if (i > 0 && !(d.seq[i] > d.seq[i - 1])) abort();
            const double s = d.seq[i] * 1.5; /* between the lengths: the interpolation stays a rate */
            const double *series[3] = {d.attn_fwd_flops_per_s[t], d.attn_bwd_flops_per_s[t], d.eager_flops_per_s[t]};
            for (int k = 0; k < 3; k++) {
                const double r = est_cpu_rate_at(&d, series[k], s);
                if (!(series[k][i] > 0) || !(r > 0) || !isfinite(r)) abort();
            }
        }
    for (int n = 2; n <= 8; n++)
        for (int w = 0; w < EST_CPU_WORKS; w++)
            if (!(d.meet_s[n][w] >= 0) || !isfinite(d.meet_s[n][w])) abort();
    if (!(d.op_dispatch_s >= 0) || !isfinite(d.op_dispatch_s)) abort();
    for (int k = 1; k < EST_CPU_KERNELS; k++) /* ftrain's kernels: a positive, finite rate each */
        for (int t = 0; t < 2; t++)
            if (!(d.kernel_elems_per_s[k][t] > 0) || !isfinite(d.kernel_elems_per_s[k][t])) abort();
    return 0;
}
