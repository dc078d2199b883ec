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
                            d.attn_fwd_flops_per_s[0], d.attn_fwd_flops_per_s[1], d.attn_bwd_flops_per_s[0],
                            d.attn_bwd_flops_per_s[1], d.eager_flops_per_s[0], d.eager_flops_per_s[1], d.threads};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (!(rates[i] > 0) || !isfinite(rates[i])) abort();
    for (int n = 2; n <= 8; n++)
        if (!(d.meet_s[n] >= 0) || !isfinite(d.meet_s[n])) abort();
    if (!(d.op_dispatch_s >= 0) || !isfinite(d.op_dispatch_s)) abort();
    return 0;
}
