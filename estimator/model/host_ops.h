/* The host's work of one module's forward and backward in eager PyTorch: how
 * many ATen ops the Python side dispatches in forward (views included: each
 * goes through Python, the dispatcher and autograd's recording whether or not
 * it launches a kernel) and how many the autograd engine dispatches in
 * backward (each node's formula from tools/autograd/derivatives.yaml, the
 * gradient sums of tensors read more than once, AccumulateGrad). Counted from
 * the block description (module_graph.h) op by op, so whatever the
 * description holds (PEFT's adapters and casts, bitsandbytes' dequantization,
 * Liger's kernels) is counted with it. The time ledger prices each op at the
 * host's cost per op (kernel_host_overhead_s); docs/method.md, "The host's
 * work per step", gives every count with its source (torch 2.11,
 * transformers 5.17 modeling_llama.py, peft 0.21 tuners/lora/layer.py). */
#ifndef EST_HOST_OPS_H
#define EST_HOST_OPS_H

#include "module_graph.h"

typedef struct est_host_ops {
    double forward;      /* ATen ops dispatched by the module's forward */
    double backward;     /* ... by the autograd engine in its backward */
    double module_calls; /* nn.Module.__call__s of its forward (counted, not priced) */
} est_host_ops;

/* The host ops of decoder block `m` (built by est_module_block). */
est_host_ops est_module_host_ops(const est_module *m);

#endif
