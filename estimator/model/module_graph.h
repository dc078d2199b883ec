/* One module's forward as autograd sees it: the parameters it reads, the
 * tensors its ops make, and for each op what it saves for its backward.
 *
 * This is the one description of a decoder block (and of the embedding and
 * the LM head with its loss) from which everything else is derived:
 * parameter counts, LoRA shapes, the saved activations, the tensors alive at
 * each instant of the forward and backward (the memory ledger's events, via
 * estimator/frameworks/autograd.c) and the work of each op (the time ledger's).
 *
 * The rules are PyTorch's, op by op, as tools/autograd/derivatives.yaml and
 * the generated VariableType code apply them: an op saves an input only when
 * a gradient that needs it will be computed (should_compute_output), a
 * tensor lives while the forward still reads it or a backward node saved it,
 * and the gradient of a tensor exists from the backward of its last reader to
 * the backward of its producer. Views share their base's storage: the builder
 * passes the same tensor on. A module is built for one rank's micro-batch
 * (sizes in elements and bytes per element) and one dtype regime
 * (est_regime), which the framework decides; the builder never asks which
 * framework runs it. */
#ifndef EST_MODULE_GRAPH_H
#define EST_MODULE_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EST_MOD_MAX_PARAMS 48
#define EST_MOD_MAX_TENSORS 192
#define EST_MOD_MAX_OPS 160
#define EST_MOD_MAX_IN 5
#define EST_MOD_NAME 32

/* What a parameter is, for the frameworks (which Linear weights autocast
 * casts, which LoRA can target, what a persistence threshold keeps whole). */
typedef enum {
    EST_PK_LINEAR_WEIGHT, /* nn.Linear.weight (out, in) */
    EST_PK_LINEAR_BIAS,
    EST_PK_NORM,          /* an RMSNorm weight (h) */
    EST_PK_EMBEDDING,     /* (V, h) */
    EST_PK_ADAPTER,       /* a LoRA A or B weight */
} est_param_kind;

typedef struct est_mparam {
    char name[EST_MOD_NAME];
    int64_t rows, cols;   /* elements = rows * cols; (out, in) for a Linear weight */
    est_param_kind kind;
    int8_t lora_target;   /* est_lora_target of the Linear (or adapter), -1 none */
    bool trainable;       /* requires grad */
    int64_t copies;       /* tensors it stands for (MoE experts: E); elements are per copy */
    int64_t lead;         /* a 3-D tensor's first dimension (transformers 5.x's fused experts:
                             E), its rows that many equal slices; 0 for a matrix or vector */
    int8_t elem_bytes;    /* bytes per element of the parameter as the module holds it (its
                             gradient's dtype too) */
    bool tied;            /* the same tensor as the embedding (a tied LM head): not counted
                             again, its gradient accumulates into the embedding's */
} est_mparam;

/* An operand of an op: a tensor (>= 0) or a parameter (EST_PARAM(i)). */
#define EST_PARAM(i) (-2 - (i))
#define EST_IS_PARAM(x) ((x) <= -2)
#define EST_PARAM_INDEX(x) (-2 - (x))
#define EST_NONE (-1)

/* What a tensor is, for the memory ledger's categories. */
typedef enum {
    EST_ROLE_ACTIVATION, /* made by the forward; saved ones live until their backward */
    EST_ROLE_LOGITS,     /* the LM head's output, the loss's tensors and their gradients */
    EST_ROLE_WEIGHT,     /* a weight made for the forward: autocast's cast, a dequantized
                            base weight */
} est_tensor_role;

typedef struct est_mtensor {
    char name[EST_MOD_NAME];
    int64_t elems;
    int8_t elem_bytes;
    int16_t producer;      /* the op that makes it; -1: the module's input */
    int16_t last_read;     /* the last op of the forward that reads it; -1: none */
    int16_t saved_until;   /* the earliest op (by index) that saves it: it lives until that
                              op's backward; -1: not saved */
    bool requires_grad;
    bool is_output;        /* the module's output: survives the module */
    bool held;             /* a Python reference keeps it until the module returns (the
                              model's outputs object holds the logits until the loss is back) */
    bool autocast_cached;  /* autocast's cast of a weight: its cache holds it until the
                              autocast region exits (the end of the forward) */
    bool model_output;     /* returned in the model's outputs (the logits, the KV cache): the
                              training loop decides how long it lives, so the framework's
                              seam holds it (seam_hf.c); the walker treats it like any tensor */
    est_tensor_role role;
} est_mtensor;

typedef enum {
    EST_OP_CAST,      /* .to(dtype) or autocast's cast: a copy; saves nothing */
    EST_OP_COPY,      /* .contiguous(), repeat_kv's reshape, cat, neg, slices: saves nothing */
    EST_OP_POW,       /* x.pow(2): saves x */
    EST_OP_REDUCE,    /* mean/sum over the last dim: saves nothing */
    EST_OP_SCALAR,    /* + eps, / sqrt(d), * scale: saves nothing */
    EST_OP_RSQRT,     /* saves its output */
    EST_OP_MUL,       /* a * b: saves b if a needs a gradient, a if b does */
    EST_OP_ADD,       /* a + b: saves nothing; its backward passes the gradient on */
    EST_OP_LINEAR,    /* x @ W^T (+ b): saves x if W trains, W if x needs a gradient */
    EST_OP_BMM,       /* batched a @ b: saves b if a needs a gradient, a if b does */
    EST_OP_ACT,       /* silu / gelu(tanh): saves its input */
    EST_OP_TANH,      /* saves its output */
    EST_OP_SOFTMAX,   /* softmax / log_softmax: saves its output */
    EST_OP_ATTENTION, /* fused SDPA / flash: saves q, k, v, its output and a second output
                         (the log-sum-exp) */
    EST_OP_DROPOUT,   /* native_dropout: saves its mask (second output) */
    EST_OP_EMBEDDING, /* embedding lookup: saves the indices (not counted: int64 ids) */
    EST_OP_LOSS,      /* nll_loss: saves nothing of size */
    EST_OP_DEQUANT,   /* bitsandbytes: a quantized weight made whole for one matmul */
    EST_OP_FUSED_LOSS, /* fused linear cross-entropy (Liger): computes the loss and both
                          gradients in its forward, saves them (out: the input's gradient,
                          out2: the weight's) and hands them back in its backward */
    EST_OP_KERNEL,     /* a custom autograd.Function (Liger-Kernel's Triton kernels): saves
                          exactly what the builder marks (est_module_kernel_saves), and may
                          work in place (est_mop.in_place, grad_from_out, grad_into_saved) */
    EST_OP_KIND_COUNT
} est_op_kind;

typedef struct est_mop {
    est_op_kind kind;
    char name[EST_MOD_NAME];
    int16_t in[EST_MOD_MAX_IN];
    int8_t n_in;
    int16_t out, out2;      /* tensors it makes (out2: lse, dropout mask); -1 none */
    bool saves[EST_MOD_MAX_IN];
    bool saves_out, saves_out2;
    bool grad_in[EST_MOD_MAX_IN]; /* its backward makes a gradient for this input */
    bool backward;          /* its backward runs (its output needs a gradient) */
    /* Transient bytes inside the op's kernel beyond its outputs (eager
     * attention's scores beside the probabilities, a dequantized weight). */
    int64_t forward_transient_bytes, backward_transient_bytes;
    /* Work: a GEMM of (M x K) @ (K x N), `count` times (LINEAR, BMM). */
    double M, K, N, count;
    /* EST_OP_KERNEL only (in-place Triton kernels, Liger-Kernel v0.8.2):
     *  - in_place: the forward overwrites input 0 (and input 1 when both
     *    are rotated together, RoPE's q and k) and makes no tensor; the
     *    builder passes the input on. Its backward rewrites the gradient
     *    where it lies: those inputs get no new gradient tensor.
     *  - grad_from_out[k]: input k's gradient is the output's gradient
     *    storage, rewritten (RMSNorm's in_place dX = dY), as an add passes it.
     *  - grad_into_saved[k]: input k's gradient is written into input k's
     *    own saved storage (SwiGLU's da, db; cross-entropy's logits). */
    bool in_place;
    bool grad_from_out[EST_MOD_MAX_IN];
    bool grad_into_saved[EST_MOD_MAX_IN];
    /* An op-level checkpoint policy keeps its outputs from the first forward
     * to the recompute, which takes them instead of running it (sac.h). */
    bool sac_save;
    /* The last op of a custom autograd Function (est_module_function): its
     * forward ends with ctx.save_for_backward, so a non-reentrant
     * checkpoint's recompute runs through it. */
    bool packs;
    /* -1, or the op whose backward ends the custom autograd Function this op
     * belongs to: the gradient of this op's output (the engine's
     * grad_outputs, the backward's locals) stays until then. */
    int16_t grad_held_until;
} est_mop;

typedef enum { EST_MODULE_EMBEDDING, EST_MODULE_BLOCK, EST_MODULE_HEAD } est_module_kind;

/* Tensors the model's forward makes once, before the first decoder layer, and
 * passes to every layer: the attention mask of _update_causal_mask /
 * create_causal_mask, and RoPE's cos and sin where one model-level rotary
 * module computes them (stack.h rope_once_per_forward). The embedding module
 * makes them; each block takes them as inputs, so every block's saved
 * references point at the one storage. */
typedef enum { EST_SHARED_MASK, EST_SHARED_COS, EST_SHARED_SIN, EST_SHARED_COUNT } est_shared;

typedef struct est_module {
    est_module_kind kind;
    est_mparam params[EST_MOD_MAX_PARAMS];
    int n_params;
    est_mtensor tensors[EST_MOD_MAX_TENSORS];
    int n_tensors;
    est_mop ops[EST_MOD_MAX_OPS];
    int n_ops;
    int16_t input;          /* the tensor that enters (-1: token ids) */
    int16_t output;         /* the tensor that leaves (-1: the loss) */
    int16_t shared[EST_SHARED_COUNT]; /* what the embedding module makes once per forward
                               and every block reads (est_shared); -1: none */
    bool no_grad;           /* built to run under torch.no_grad (a checkpointed block's first
                               forward): nothing requires grad, nothing is saved */
    bool train_masked;      /* partial training: parameter i trains iff bit i of train_mask */
    uint64_t train_mask;
    bool linear_saves_input; /* est_regime.linear_saves_input */
    bool overflow;          /* a builder ran out of room: a bug, reported as an error */
} est_module;

/* The dtypes a framework runs the modeling code in (it decides them; the
 * builders only apply them):
 *  - module cast (DeepSpeed fp16/bf16, FSDP MixedPrecision, pure bf16): weights,
 *    Linear outputs and the residual stream in the compute dtype;
 *  - autocast (plain PyTorch AMP over fp32 weights): fp32 weights and residual
 *    stream, each Linear casting its input and weight to the compute dtype;
 *  - fp32: 4 bytes everywhere. */
typedef struct est_regime {
    int act;            /* bytes of the compute dtype: Linear outputs, attention */
    int resid;          /* bytes of the residual stream */
    bool autocast;      /* torch.autocast casts each Linear's input and weight */
    int weight;         /* bytes of a base weight as the module holds it */
    bool train_base;    /* the model's own weights train (false under LoRA) */
    int adapter;        /* bytes of a LoRA weight as the module holds it */
    /* Partial training (trainable.h): when `masked`, parameter i of the module
     * (registration order) trains iff bit i of train_mask is set, whatever
     * train_base and the adapters say, and the module's input requires grad
     * iff in_grad (something before it trains, or the embedding's output is
     * made to require grad). */
    bool masked;
    uint64_t train_mask;
    bool in_grad;
    /* Every Linear is a custom autograd.Function that saves its input
     * whenever it records a node, its weight frozen or not (DeepSpeed
     * ZeRO-3's LinearFunctionForZeroStage3, which zero.Init installs as
     * F.linear: runtime/zero/linear.py setup_context, save_for_backward(input,
     * weight, bias)); torch's linear saves the input only for a weight that
     * trains. */
    bool linear_saves_input;
} est_regime;

/* Building. */
void est_module_begin(est_module *m, est_module_kind kind);
int est_module_param(est_module *m, const char *name, int64_t rows, int64_t cols,
                     est_param_kind kind, int lora_target, bool trainable, int elem_bytes);
/* A tensor that exists before the module runs (its input). */
int est_module_input(est_module *m, const char *name, int64_t elems, int elem_bytes,
                     bool requires_grad);
/* An op reading `n_in` operands and making a tensor of `elems` x `elem_bytes`
 * (elems 0: no output). Returns the output tensor, or -1. The save rules of
 * `kind` are applied when the module is finished. */
int est_module_op(est_module *m, est_op_kind kind, const char *name, int64_t elems,
                  int elem_bytes, int n_in, const int16_t *in);
/* The op just added also makes a second tensor (SDPA's log-sum-exp, dropout's mask). */
int est_module_op_out2(est_module *m, const char *name, int64_t elems, int elem_bytes);
/* Marks tensor t's role (and, for `held`, that the module holds it to its end). */
void est_module_tensor_role(est_module *m, int t, est_tensor_role role, bool held);
/* A custom autograd.Function (EST_OP_KERNEL) just added saves input k when
 * bit k of `inputs` is set, its output when bit 0 of `outs` is, its second
 * output when bit 1 is (ctx.save_for_backward as its source writes it; only
 * when its backward runs). */
void est_module_kernel_saves(est_module *m, unsigned inputs, unsigned outs);
/* The GEMM shape of the op just added. */
void est_module_op_gemm(est_module *m, double M, double K, double N, double count);
/* Resolves requires_grad, what each op saves and each tensor's lifetime;
 * marks `output` as the module's output. */
void est_module_finish(est_module *m, int output);

/* The ops from `first_op` to the last one added are one custom
 * torch.autograd.Function (one backward node): they save nothing of their
 * own; the `n` tensors in `saved` (its ctx.save_for_backward) live until the
 * node's backward ends, which is the backward of its first op (the last of
 * its ops to run backward), and the last op packs them; the gradients of
 * the later ops' outputs are held until that backward ends too. */
void est_module_function(est_module *m, int first_op, const int *saved, int n);

/* Derived figures. */
int64_t est_module_param_elems(const est_module *m);            /* every parameter */
int64_t est_module_trainable_elems(const est_module *m);        /* those that train */
int64_t est_module_largest_param(const est_module *m);          /* elements of the largest */
int64_t est_mtensor_bytes(const est_mtensor *t);
/* Bytes autograd keeps from the module's forward to its backward. */
int64_t est_module_saved_bytes(const est_module *m);
/* Forward FLOPs of its GEMMs (2 M K N per GEMM). */
double est_module_gemm_flops(const est_module *m);

extern const char *const est_op_kind_names[EST_OP_KIND_COUNT];

#endif
