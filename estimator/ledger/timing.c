/* The time ledger: the work events of one step (estimator/frameworks/work.c and
 * work_parallel.c emit them) at achieved rates, then the critical path. */
#include "timing.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attn_rate.h"
#include "fw_registry.h"
#include "cpu_device.h"
#include "gemm.h"
#include "lora.h"
#include "peft.h"
#include "tp.h"

/* Achieved rates of one GPU for one run. */
typedef struct rates {
    double peak;       /* dense FLOP/s of the compute precision */
    est_gemm_device gemm16, gemm32; /* GEMMs in 16-bit and in fp32 (gemm.h) */
    est_gemm_device gemm8;          /* FP8 GEMMs (torch._scaled_mm; --fp8) */
    double attn_fwd, attn_bwd; /* fused attention kernels' FLOP/s per pass (attn_rate.h) */
    double bwd_ratio;  /* flash/SDPA backward FLOPs over forward */
    double bw;         /* achieved HBM bytes/s */
    double k_gpu;      /* device gap per kernel */
    double k_host;     /* host dispatch per kernel */
    double layer_host; /* the framework's host time per block and micro-batch */
    double lane_link;  /* bytes/s of ZeRO-3's per-module collectives */
    double node_link;  /* bytes/s of a collective within the node (--tp) */
    double node_hop_s, base_lat_s; /* NCCL's ring latencies within the node */
    double interference; /* extra compute time per second of collective beside it */
    double pcie;       /* achieved PCIe bytes/s of one GPU, its uplink's share */
    double host_bw;    /* bytes/s the node's CPU optimizers stream at together */
    double ranks_node; /* ranks sharing that host */
    double sm_clock_hz; /* an SM's clock: its L1 serves one wavefront a cycle (EST_EV_SIMT) */
    double sms;         /* the card's SMs, over which a SIMT kernel's blocks spread */
    bool on_cpu;       /* ftrain's CPU backend: */
    est_cpu_device cpu; /* ... the CPU device as each rank sees it (cpu_device.h) */
    double cpu_share;  /* ... how much longer an op takes with every rank on the cores */
    double cpu_seq;    /* ... the sequence length its attention rates are read at */
    bool cpu_fp32;     /* ... fp32 (else bf16-mixed): which attention kernels run */
} rates;

double est_peak_flops(const est_run *run) {
    switch (run->precision) {
    case EST_PREC_FP32: return run->gpu.fp32_tflops * 1e12; /* allow_tf32 is off by default */
    case EST_PREC_FP16_MIXED: return run->gpu.fp16_tflops * 1e12;
    case EST_PREC_BF16_MIXED:
    case EST_PREC_BF16: return run->gpu.bf16_tflops * 1e12;
    }
    return 0;
}

/* The link a collective among all ranks runs at, bytes/s: NVLink (else PCIe)
 * within a node; across nodes the slower of it and the network per node (a ring
 * crosses each node's network once per direction whatever the ring count). */
static double link_bytes_per_s(const est_run *run, const est_constants *k, double eff) {
    double link = run->gpu.nvlink_gb_per_s > 0 ? run->gpu.nvlink_gb_per_s : run->gpu.pcie_gb_per_s;
    if (run->nodes > 1) {
        double inter = run->inter_node_gb_per_s > 0 ? run->inter_node_gb_per_s
                                                    : k->value[EST_K_INTER_NODE_GB_PER_S];
        link = fmin(link, inter);
    }
    return link * 1e9 * eff;
}

/* GPUs behind one PCIe uplink to the CPU: two on an 8-GPU NVLink board (HGX:
 * a PCIe switch per pair), one on PCIe cards and small nodes. Offload copies
 * of all ranks run at once, so a GPU gets its uplink's share. */
static double pcie_sharing(const est_run *run, const est_constants *k) {
    const bool hgx = run->gpu.nvlink_gb_per_s > 0 && run->gpus_per_node >= 4;
    return hgx ? fmax(1, k->value[EST_K_HGX_GPUS_PER_PCIE_SWITCH]) : 1;
}

/* Bytes/s the CPU optimizers of a node's ranks stream at together: the
 * node's DRAM at the share all of them reach at once, or what its cores can
 * move (DeepSpeedCPUAdam's rate per core, measured), the smaller. */
static double host_bytes_per_s(const est_run *run, const est_constants *k) {
    const double g = (double)run->gpus_per_node;
    const double mem = (run->host_mem_gb_per_s > 0 ? run->host_mem_gb_per_s
                                                   : g * k->value[EST_K_HOST_MEM_GB_PER_S_PER_GPU]) *
                       1e9;
    const double cores = run->host_cores > 0 ? (double)run->host_cores : g * k->value[EST_K_HOST_CORES_PER_GPU];
    /* Each rank's OpenMP team spans every core (the deepspeed launcher sets
     * OMP_NUM_THREADS only with --bind_cores_to_rank, launcher/launch.py
     * v0.14.2): with more than one rank the teams contend for them. */
    const double contention = g > 1 ? 1 + k->value[EST_K_CPU_OPTIM_OVERSUBSCRIPTION] : 1;
    return fmin(mem * k->value[EST_K_HOST_MEM_EFF], cores * k->value[EST_K_CPU_ADAM_CORE_BYTES_PER_S]) /
           contention;
}

/* ftrain's CPU backend: the measured CPU device; false without its profile. */
static bool cpu_rates_of(const est_run *run, const est_constants *k, rates *r) {
    const est_cpu_device *d = est_cpu_device_get();
    if (!d) return false;
    const est_cpu_device team = est_cpu_device_team(d, est_run_world(run));
    const bool fp32 = run->precision == EST_PREC_FP32;
    *r = (rates){
        .peak = fp32 ? team.gemm_fp32_flops_per_s : team.gemm_bf16_flops_per_s,
        .bwd_ratio = k->value[EST_K_FLASH_BWD_FLOPS_RATIO],
        .on_cpu = true,
        .cpu = team,
        .cpu_share = est_cpu_rank_share(d, (double)est_run_world(run)),
        .cpu_seq = (double)run->seq_len,
        .cpu_fp32 = fp32,
    };
    return true;
}

/* The boost clock behind the card's fp32 peak: 2 FLOPs per lane per cycle,
 * 128 fp32 lanes per SM on Hopper, Ada, Blackwell and GA10x Ampere (NVIDIA
 * H100 whitepaper, "H100 SM architecture"; Ada and GA102 whitepapers), 64 on
 * GA100, the A100 (A100 whitepaper, "A100 SM architecture"): 1.98 GHz for an
 * H100 or H200, 1.41 GHz for an A100. 0 without an SM count. */
static double sm_clock_hz(const est_gpu *g) {
    const double lanes = strncmp(g->name, "a100", 4) == 0 ? 64 : 128;
    return g->sms > 0 ? g->fp32_tflops * 1e12 / (2.0 * lanes * g->sms) : 0;
}

/* False when the time of `run` is not modelled: a device without peak
 * figures or a measured matmul ceiling. */
static bool rates_of(const est_run *run, const est_constants *k, rates *r) {
    if (est_cpu_device_run(run)) return cpu_rates_of(run, k, r);
    const double peak = est_peak_flops(run);
    const double bw = run->gpu.hbm_gb_per_s * 1e9 * k->value[EST_K_HBM_EFF];
    if (!(peak > 0) || !(bw > 0) || !(run->gpu.matmul_ceiling_tflops > 0) ||
        !(k->value[EST_K_ATTN_PEAK_EFF] > 0))
        return false;
    *r = (rates){
        .peak = peak,
        .gemm16 = est_gemm_device_of(&run->gpu, 2, bw),
        .gemm32 = est_gemm_device_of(&run->gpu, 4, bw),
        .gemm8 = est_gemm_device_of(&run->gpu, 1, bw),
        .attn_fwd = est_attn_flops_per_s(run, false, peak, k->value[EST_K_ATTN_PEAK_EFF]),
        .attn_bwd = est_attn_flops_per_s(run, true, peak, k->value[EST_K_ATTN_PEAK_EFF]),
        .bwd_ratio = k->value[EST_K_FLASH_BWD_FLOPS_RATIO],
        .bw = bw,
        .k_gpu = k->value[EST_K_KERNEL_GPU_S],
        .k_host = k->value[EST_K_KERNEL_HOST_S],
        .layer_host = k->value[EST_K_FRAMEWORK_LAYER_HOST_S],
        .lane_link = link_bytes_per_s(run, k, k->value[EST_K_ZERO3_COMM_EFF]),
        .node_link = (run->gpu.nvlink_gb_per_s > 0 ? run->gpu.nvlink_gb_per_s : run->gpu.pcie_gb_per_s) * 1e9 *
                     k->value[EST_K_NCCL_BUS_EFF],
        .node_hop_s = run->gpu.nvlink_gb_per_s > 0 ? k->value[EST_K_NCCL_NVLINK_HOP_S] : k->value[EST_K_NCCL_PCIE_HOP_S],
        .base_lat_s = k->value[EST_K_NCCL_BASE_LAT_S],
        .interference = k->value[EST_K_COMM_INTERFERENCE],
        .pcie = run->gpu.pcie_gb_per_s * 1e9 * k->value[EST_K_PCIE_EFF] / pcie_sharing(run, k),
        .host_bw = host_bytes_per_s(run, k),
        .ranks_node = (double)run->gpus_per_node,
        .sm_clock_hz = sm_clock_hz(&run->gpu),
        .sms = (double)run->gpu.sms,
    };
    return true;
}

/* The time of `count` GEMMs (M x K) @ (K x N) in dtype bytes c issued in
 * `kernels` launches (a batched launch shares its waves): the shape against
 * the card's measured ceiling (gemm.c). */
static double gemm_s(const rates *r, double M, double K, double N, double c, double count,
                     double kernels) {
    const est_gemm_device *d = c >= 4 ? &r->gemm32 : c < 2 ? &r->gemm8 : &r->gemm16;
    if (!(kernels >= 1)) kernels = 1;
    return kernels * est_gemm_time_s(d, M, K, N, c, count / kernels);
}

/* One unit being priced. */
typedef struct unit_acc {
    est_unit unit;
    size_t moment;           /* the moment it is booked on */
    est_time_part part;
    double host_frac;        /* of the framework's per-block host time */
    double host_ops;         /* ATen ops the host dispatches (0: its kernels stand for them) */
    double extra_ops;        /* ... and the framework's own on top (work_ds_host.h) */
    double waited_ops;       /* ... of those, the ones issued before a host sync in the unit */
    double lane_bytes;       /* ZeRO-3 collectives beside the compute */
    double blocking_bytes;   /* ... and those the compute waits for */
    double node_local_s;     /* --tp: the activations' collectives the compute waits for */
    double pcie_bytes, host_memory_bytes;
} unit_acc;

/* Adds one work event's cost to the unit it belongs to. */
static void price(const rates *r, const est_event *e, unit_acc *u) {
    est_time_part *p = &u->part;
    if (r->on_cpu) { /* no launches, hosts or links: the op's time on the shared cores */
        p->gpu_s += r->cpu_share * est_cpu_event_s(&r->cpu, e, r->cpu_fp32, r->cpu_seq, r->bwd_ratio, &p->flops,
                                                   &p->hbm_bytes);
        return;
    }
    switch (e->kind) {
    case EST_EV_GEMM: {
        const double M = e->u.gemm.M, K = e->u.gemm.K, N = e->u.gemm.N;
        p->flops += e->u.gemm.count * 2.0 * M * K * N;
        p->gpu_s += gemm_s(r, M, K, N, e->u.gemm.elem_bytes, e->u.gemm.count, e->u.gemm.kernels);
        p->kernels += e->u.gemm.kernels;
        break;
    }
    case EST_EV_MEMORY_OP:
        p->hbm_bytes += e->u.op.bytes;
        p->gpu_s += e->u.op.bytes / r->bw;
        p->kernels += e->u.op.kernels;
        break;
    case EST_EV_ATTENTION: {
        double flops = e->u.attn.backward ? r->bwd_ratio * e->u.attn.flops : e->u.attn.flops;
        p->flops += flops;
        p->gpu_s += fmax(flops / (e->u.attn.backward ? r->attn_bwd : r->attn_fwd), e->u.attn.bytes / r->bw);
        p->kernels += e->u.attn.kernels;
        break;
    }
    case EST_EV_HOST:
        u->host_frac += e->u.host.layer_host_frac;
        u->host_ops += e->u.host.ops;
        u->extra_ops += e->u.host.extra_ops;
        u->waited_ops += e->u.host.waited_ops;
        p->waits |= e->u.host.waits;
        break;
    case EST_EV_LANE_COMM: {
        const double W = e->u.lane.ranks;
        double wire = e->u.lane.elems * ((W - 1) / W) * e->u.lane.elem_bytes;
        if (e->u.lane.node_local) { /* ring passes within the node: bytes, then latency per pass */
            if (r->node_link > 0)
                u->node_local_s += wire / r->node_link + e->u.lane.collectives * (r->base_lat_s + (W - 1) * r->node_hop_s);
            break;
        }
        if (e->u.lane.blocking) u->blocking_bytes += wire;
        else u->lane_bytes += wire;
        break;
    }
    case EST_EV_PCIE: u->pcie_bytes += e->u.transfer.bytes; break;
    case EST_EV_HOST_MEMORY: u->host_memory_bytes += e->u.transfer.bytes; break;
    case EST_EV_SIMT:
        if (r->sm_clock_hz > 0) p->gpu_s += est_row_kernel_sm_cycles(&e->u.simt.kernel, r->sms) / r->sm_clock_hz;
        p->kernels += e->u.simt.kernels;
        break;
    default: break;
    }
}

/* Launch costs once a unit's work is complete (a gap per kernel on the
 * device; on the host the cost per op of each ATen op it dispatches, counted
 * from the block description for a block (model/host_ops.h: views and
 * backward formulas included), else one per kernel; plus the ops the
 * framework dispatches beyond them (DeepSpeed's hooks and step,
 * work_ds_host.h) and its own host time), and its collectives' lane. */
static void finish(const rates *r, unit_acc *u) {
    est_time_part *p = &u->part;
    p->gpu_s += p->kernels * r->k_gpu;
    p->host_s += ((u->host_ops > 0 ? u->host_ops : p->kernels) + u->extra_ops) * r->k_host +
                 u->host_frac * r->layer_host;
    p->waited_s = fmin(p->host_s, u->waited_ops * r->k_host);
    p->gpu_s += u->node_local_s;
    if (r->lane_link > 0) {
        p->comm_s = u->lane_bytes / r->lane_link;
        /* While the collectives run beside the compute they share the GPU:
         * the compute of the overlap takes longer. */
        p->gpu_s += r->interference * fmin(p->gpu_s, p->comm_s);
        p->gpu_s += u->blocking_bytes / r->lane_link;
    }
}

static double unit_s(const est_time_part *p) { return fmax(fmax(p->gpu_s, p->host_s), p->comm_s); }

/* The optimizer unit: its host and device work overlap, except the ops the
 * host issues before a sync inside it (DeepSpeed ZeRO-1/2's step reads its
 * overflow flag and its norm's validity back, stage_1_and_2.py v0.19.8,
 * before it issues the clip and the optimizer: work_ds_host.c). Their time
 * adds to the rest; the device's work before the sync (the checks' small
 * reductions) runs while the host issues them. */
static double step_unit_s(const rates *r, const unit_acc *u) {
    const est_time_part *p = &u->part;
    const double waited_s = fmin(p->host_s, u->waited_ops * r->k_host);
    if (waited_s <= 0) return unit_s(p);
    return waited_s + fmax(fmax(p->gpu_s, p->host_s - waited_s), p->comm_s);
}

/* The host issues a micro-batch's kernels and the device runs them in order,
 * asynchronously (CUDA launches return at once): nothing in the forward and
 * backward waits for the device, so the host runs ahead and the micro-batch
 * is a two-stage pipeline, not the sum of each unit's slower side. The
 * device finishes unit i no earlier than its previous work plus the unit's
 * own (its compute, or the collectives beside it), and no earlier than the
 * host has issued the unit's last kernel plus that kernel's run. The waits
 * that end the pipeline come after backward: the HF Trainer's
 * `torch.isnan(tr_loss_step)` (trainer.py, transformers 4.40) and
 * DeepSpeed ZeRO-3's `reduce_and_partition_stream.synchronize()` in
 * independent_gradient_partition_epilogue (stage3.py, v0.14.2); docs/method.md,
 * "The host runs ahead". A unit that starts with a host sync (p->waits: a
 * .item() inside the forward, Liger's fused linear cross-entropy) is issued
 * only once the device has caught up; ops it issues after such a sync before
 * the unit's device work can go on (p->waited_s: PEFT's FourierFT and
 * WaveFT build their delta from CPU-held indices, work_peft_delta.c) leave
 * the device idle that long. Returns the device's finish after the unit. */
double est_pipeline_unit_s(double *host_done_s, double device_done_s, const est_time_part *p) {
    if (p->waits && *host_done_s < device_done_s) *host_done_s = device_done_s;
    const double device_s = fmax(p->gpu_s, p->comm_s);
    const double last_kernel_s = device_s / fmax(1, p->kernels);
    const double start_s = p->waited_s > 0 ? fmax(device_done_s, *host_done_s + p->waited_s) : device_done_s;
    *host_done_s += p->host_s;
    return fmax(start_s + device_s, *host_done_s + last_kernel_s);
}

/* What the ledger adds up while it walks the units. */
typedef struct walk {
    est_time_detail *out;
    est_timeline *tl;        /* NULL: no per-moment booking */
    bool seen[EST_UNIT_COUNT];
    double lane_wait;        /* per micro-batch: how much longer units take for their lanes */
    double host_done_s;      /* per micro-batch: when the host has issued the units so far */
    double device_done_s;    /* ... and when the device has run them (est_pipeline_unit_s) */
    double backward_gpu_s;   /* per micro-batch: block and LM head backward, device time */
    double mb_flops;
    size_t reduce_moment, optimizer_moment;
    bool has_reduce, has_optimizer;
} walk;

static void book(walk *w, size_t moment, double flops, double hbm, double s) {
    if (!w->tl || moment >= w->tl->count) return;
    w->tl->phases[moment].flops += flops;
    w->tl->phases[moment].hbm_bytes += hbm;
    w->tl->phases[moment].time_s += s;
}

static est_time_part *named_part(est_time_detail *t, est_unit u) {
    switch (u) {
    case EST_UNIT_EMBED_FWD: return &t->embed_fwd;
    case EST_UNIT_BLOCK_FWD: return &t->block_fwd;
    case EST_UNIT_HEAD_FWD: return &t->head_fwd;
    case EST_UNIT_LOSS_BWD: return &t->loss_bwd;
    case EST_UNIT_HEAD_BWD: return &t->head_bwd;
    case EST_UNIT_BLOCK_BWD: return &t->block_bwd;
    case EST_UNIT_EMBED_BWD: return &t->embed_bwd;
    default: return NULL;
    }
}

/* A priced unit into the micro-batch or step totals. */
static void add_unit(const rates *r, walk *w, const unit_acc *u) {
    est_time_detail *t = w->out;
    const est_time_part *p = &u->part;
    est_time_part *named = named_part(t, u->unit);
    if (named) {
        if (!w->seen[u->unit]) *named = *p; /* every block's unit is alike: the first */
        const double before_s = w->device_done_s;
        w->device_done_s = est_pipeline_unit_s(&w->host_done_s, before_s, p);
        t->microbatch_s = w->device_done_s;
        t->gpu_microbatch_s += p->gpu_s;
        t->host_microbatch_s += p->host_s;
        w->mb_flops += p->flops;
        w->lane_wait += unit_s(p) - fmax(p->gpu_s, p->host_s);
        if (u->unit == EST_UNIT_BLOCK_BWD || u->unit == EST_UNIT_HEAD_BWD) w->backward_gpu_s += p->gpu_s;
        book(w, u->moment, p->flops, p->hbm_bytes, w->device_done_s - before_s); /* what it adds */
    } else if (u->unit == EST_UNIT_REDUCE) {
        w->has_reduce = true;
        w->reduce_moment = u->moment;
    } else if (u->unit == EST_UNIT_OPTIMIZER) {
        t->optimizer_s += step_unit_s(r, u);
        t->pcie_bytes += u->pcie_bytes;
        t->pcie_s += r->pcie > 0 ? u->pcie_bytes / r->pcie : 0;
        /* Every rank of the node steps at the same moment, on the same host. */
        t->cpu_optimizer_s += r->host_bw > 0 ? r->ranks_node * u->host_memory_bytes / r->host_bw : 0;
        w->has_optimizer = true;
        w->optimizer_moment = u->moment;
    }
    w->seen[u->unit] = true;
}

/* The last body priced for one unit kind. */
typedef struct priced {
    bool valid;
    size_t body, len;
    unit_acc u;
} priced;

/* Prices the body of unit event `e`; a body shared with the unit of its kind
 * priced before it (the same block's work) is priced once. */
static void price_unit(const rates *r, const est_step *st, const est_unit_ref *e, priced *cache,
                       unit_acc *u) {
    const size_t body = e->body, len = e->body_len;
    if (cache->valid && cache->body == body && cache->len == len) {
        *u = cache->u;
    } else {
        memset(u, 0, sizeof *u);
        u->unit = e->unit;
        for (size_t i = body; i < body + len; i++) price(r, &st->work[i], u);
        finish(r, u);
        *cache = (priced){.valid = true, .body = body, .len = len, .u = *u};
    }
    u->moment = e->moment;
}

/* NCCL's latency of one ring pass over the run's ranks (a reduce-scatter or
 * an all-gather; an all-reduce is two): the base latency and one step per
 * rank but the last, across NVLink (else PCIe) within a node and across the
 * network between nodes (ncclTopoTuneModel, Ring/Simple). */
static double ring_pass_latency_s(const est_run *run, const est_constants *k) {
    const double W = (double)est_run_dp(run), nodes = (double)run->nodes;
    if (W <= 1) return 0;
    const double intra = run->gpu.nvlink_gb_per_s > 0 ? k->value[EST_K_NCCL_NVLINK_HOP_S]
                                                      : k->value[EST_K_NCCL_PCIE_HOP_S];
    return k->value[EST_K_NCCL_BASE_LAT_S] + (W - nodes) * intra + (nodes - 1) * k->value[EST_K_NCCL_NET_HOP_S];
}

/* The exposed time of the step's collectives: what compute of the window
 * they run beside does not hide. Each bucket's pass adds NCCL's latency:
 * `bucket_bytes` of data make f x bucket_bytes of wire bytes per pass. */
static void step_collective(const est_run *run, const est_constants *k, walk *w, const est_event *e) {
    est_time_detail *t = w->out;
    const bool lanes = e->u.comm.overlap == EST_OVERLAP_IN_LANES;
    const double rate = link_bytes_per_s(
        run, k, lanes ? k->value[EST_K_ZERO3_COMM_EFF] : k->value[EST_K_NCCL_BUS_EFF]);
    const double W = (double)est_run_dp(run), f = W > 1 ? (W - 1) / W : 0;
    const double passes = e->u.comm.bucket_bytes > 0 && f > 0
                              ? ceil(e->u.comm.bytes / (f * e->u.comm.bucket_bytes))
                              : 1;
    const double s = rate > 0 ? e->u.comm.bytes / rate + passes * ring_pass_latency_s(run, k) : 0;
    double exposed = s;
    switch (e->u.comm.overlap) {
    case EST_OVERLAP_NONE: break;
    case EST_OVERLAP_IN_LANES: exposed = 0; break; /* priced in the units (comm_bound_s) */
    case EST_OVERLAP_MICROBATCHES:
        exposed = fmax(0, s - e->u.comm.windows * t->gpu_microbatch_s);
        break;
    case EST_OVERLAP_BACKWARD: {
        const double window = e->u.comm.windows * w->backward_gpu_s;
        if (e->u.comm.exposed_bytes > 0) { /* overlap_comm: the weights' all-gather waits */
            const double gather = e->u.comm.exposed_bytes / rate;
            exposed = gather + fmax(0, (s - gather) - window);
            break;
        }
        exposed = fmax(0, s - window);
        const double bucket = e->u.comm.bucket_bytes, total = e->u.comm.total_bytes;
        if (bucket > 0 && total > 0) exposed = fmax(exposed, s * fmin(1, bucket / total));
        break;
    }
    }
    t->comm_bytes += e->u.comm.bytes;
    t->link_bytes_per_s = rate;
    t->comm_s += s;
    t->comm_exposed_s += exposed;
}

/* N_matmul: weights that multiply activations (each block's seven projections,
 * or under MoE its attention, router and the experts one token runs through,
 * and the LM head); the MFU convention's parameter count. */
static int64_t matmul_params(const est_run *run) {
    const ft_model *m = &run->model;
    const int64_t h = m->hidden_size, f = m->intermediate_size;
    const int64_t q = m->num_heads * m->head_dim, kv = m->num_kv_heads * m->head_dim;
    int64_t mlp = 3 * h * f;
    if (m->num_experts > 0) /* the router, the k experts a token runs through, the shared expert */
        mlp = h * m->num_experts + m->experts_per_token * 3 * h * m->moe_intermediate_size +
              (m->shared_expert_intermediate_size > 0 ? 3 * h * m->shared_expert_intermediate_size + h : 0);
    return run->layers_used * (h * q + 2 * h * kv + q * h + mlp) + m->vocab_size * h;
}


/* Totals of the step from its units (per rank). */
static void totals(const est_run *run, walk *w) {
    est_time_detail *t = w->out;
    const double GA = (double)run->grad_accum, W = (double)est_run_dp(run);
    const double L = (double)run->layers_used, s = (double)run->seq_len;
    t->comm_bound_s = GA * w->lane_wait;
    t->step_s = GA * t->microbatch_s + t->comm_exposed_s + t->optimizer_s + t->pcie_s +
                t->cpu_optimizer_s;
    t->matmul_params = matmul_params(run);
    const double tokens_rank = (double)run->micro_batch * s * GA;
    const double q = (double)(run->model.num_heads * run->model.head_dim);
    /* LoRA: the frozen weights' 2N weight-gradient FLOPs are not made (4N). */
    const double per_param = est_peft_on(run) ? 4.0 : 6.0;
    /* Packed rows attend within each sample: s^2 per row becomes s x the
     * samples' length-weighted mean (work.c, attention_core). */
    const double span = run->packed && run->packed_sample_len > 0 ? (double)run->packed_sample_len : s;
    t->model_flops = tokens_rank * (per_param * (double)t->matmul_params + 6.0 * L * span * q);
    t->executed_flops = GA * w->mb_flops;
    t->tokens_per_step = tokens_rank * W;
    if (t->step_s > 0) {
        t->it_per_s = 1.0 / t->step_s;
        t->tokens_per_s = tokens_rank * W / t->step_s;
        t->tokens_per_s_per_gpu = tokens_rank / (double)(run->tp > 1 ? run->tp : 1) / t->step_s;
        t->mfu = t->model_flops / (t->step_s * t->peak_flops);
    }
}

int est_time_ledger(const est_run *run, const est_step *st, const est_constants *k,
                    est_time_detail *out, est_timeline *tl) {
    est_run local; /* --tp: the rank's model, as the step was built (model/tp.h) */
    run = est_tp_view(run, &local);
    memset(out, 0, sizeof *out);
    rates r;
    if (st->oom || !rates_of(run, k, &r)) {
        if (!st->oom && est_cpu_device_run(run))
            snprintf(out->why, sizeof out->why, "the CPU device's rates (calibrate/host/cpu-ftrain.json, "
                                                "`make cpu-profile`) are missing or invalid");
        return 0;
    }
    out->modelled = true;
    out->peak_flops = r.peak;
    walk w = {.out = out, .tl = tl};
    priced cache[EST_UNIT_COUNT];
    memset(cache, 0, sizeof cache);
    for (size_t i = 0; i < st->unit_count; i++) { /* the units in order */
        const est_unit_ref *e = &st->units[i];
        unit_acc u;
        price_unit(&r, st, e, &cache[e->unit], &u);
        add_unit(&r, &w, &u);
    }
    /* The step's collectives last: their windows are the micro-batch's compute. */
    for (size_t i = 0; i < st->unit_count; i++) {
        const est_unit_ref *e = &st->units[i];
        if (e->unit != EST_UNIT_REDUCE) continue;
        for (size_t j = e->body; j < e->body + e->body_len; j++)
            if (st->work[j].kind == EST_EV_STEP_COMM) step_collective(run, k, &w, &st->work[j]);
    }
    if (r.on_cpu) /* the ranks' barriers, after the work between them */
        out->comm_exposed_s += est_cpu_sync_s(&r.cpu, run, (double)run->grad_accum * out->microbatch_s + out->optimizer_s);
    if (w.has_reduce) book(&w, w.reduce_moment, 0, 0, out->comm_exposed_s);
    if (w.has_optimizer)
        book(&w, w.optimizer_moment, 0, 0, out->optimizer_s + out->pcie_s + out->cpu_optimizer_s);
    totals(run, &w);
    return 0;
}

const est_constants *est_time_constants(const est_run *run, const est_constants *k,
                                        est_constants *own) {
    if (!est_fw_of(run)->own_time_profile) return k;
    if (est_constants_for(est_framework_name(run->framework), run->gpu.name, own, NULL, 0) < 0) est_constants_defaults(own);
    return own;
}
