/* ftrain's CPU kernels that are not GEMMs or attention (norms, rotary, SwiGLU,
 * residual adds, embedding, the loss over the vocabulary, the gradient norm,
 * zeroing, the optimizers, dtype conversion), each timed at the tiny test
 * models' shapes, in elements per second: the profile's
 * "kernel_elems_per_s" (estimator/ledger/cpu_device.h, est_cpu_kernel, says
 * what an element is for each). */
#ifndef CAL_FTRAIN_KERNEL_RATES_H
#define CAL_FTRAIN_KERNEL_RATES_H

enum { CAL_FTRAIN_KERNELS = 16 }; /* est_cpu_kernel's 16 kernels, in its order */

/* The profile's name of kernel k (0-15). */
const char *cal_ftrain_kernel_name(int k);

/* One round: out[k][0] fp32, out[k][1] bf16, elements per second; `best`
 * times one call (ftrain_ops_bench.c: the best of 21 repeats of ~2 ms on a CPU). */
void cal_ftrain_kernel_rates(double (*best)(void (*)(const void *), const void *), double out[][2]);

#endif
