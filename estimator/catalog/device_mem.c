#include "device_mem.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


/* Compute capability from the catalog's architecture and name: "hopper" is
 * 9.0 and "blackwell" 10.0 in models/gpus.json, "ada" 8.9; of the "ampere"
 * cards only the A100s are GA100 (8.0), the others GA102/GA104 (8.6)
 * (NVIDIA "CUDA GPUs - Compute Capability"). */
int est_gpu_threads_per_sm(const est_gpu *g) {
    if (!g) return 0;
    if (!strcmp(g->arch, "hopper") || !strcmp(g->arch, "blackwell")) return 2048;
    if (!strcmp(g->arch, "ampere") && !strncmp(g->name, "a100", 4)) return 2048;
    return 1536;
}

int64_t est_cuda_local_mem_bytes(const est_gpu *g) {
    if (!g || g->sms <= 0) return 0;
    return EST_CUDA_STACK_BYTES * est_gpu_threads_per_sm(g) * (int64_t)g->sms;
}

int64_t est_cuda_context_sourced_bytes(const est_gpu *g) {
    return est_cuda_local_mem_bytes(g) + EST_CUDA_PRINTF_FIFO_BYTES + EST_CUDA_MALLOC_HEAP_BYTES;
}

int64_t est_nccl_buffer_bytes(int channels, int connections) {
    if (channels <= 0 || connections <= 0) return 0;
    const int64_t conn = EST_NCCL_LL_BUF_BYTES + EST_NCCL_LL128_BUF_BYTES + EST_NCCL_SIMPLE_BUF_BYTES;
    return conn * channels * connections;
}

void est_cuda_context_in_force(const est_gpu *g, est_constants *k) {
    est_constants def;
    est_constants_defaults(&def);
    const int id = EST_K_CUDA_CONTEXT_BYTES;
    if (strcmp(k->source[id], def.source[id]) != 0 || !g) return; /* a profile's value */
    const int64_t sourced = est_cuda_context_sourced_bytes(g);
    const double images = k->value[EST_K_CUDA_IMAGES_BYTES];
    k->value[id] = (double)sourced + (isfinite(images) && images > 0 ? images : 0);
    snprintf(k->source[id], sizeof k->source[id],
             "%.0f MiB stack local memory (1 KiB x %d threads x %d SMs) + 9 MiB printf/heap + "
             "cuda_step_images_bytes (device_mem.c)",
             (double)est_cuda_local_mem_bytes(g) / (1 << 20), est_gpu_threads_per_sm(g), g->sms);
}

/* NCCL 2.21.5 from here on (device_mem.h). The compute capability NCCL's
 * topology search keys on: as est_gpu_threads_per_sm's mapping, 8.6/8.9
 * for the other Ampere and Ada cards (only "> 80" and ">= 90" matter). */
static int nccl_cc(const est_gpu *g) {
    if (!strcmp(g->arch, "blackwell")) return 100;
    if (!strcmp(g->arch, "hopper")) return 90;
    if (!strcmp(g->arch, "ampere") && !strncmp(g->name, "a100", 4)) return 80;
    return !strcmp(g->arch, "ada") ? 89 : 86;
}

/* A GPU's bandwidth in ncclTopoCompute's units (GB/s): over NVLink, the
 * links x NCCL's per-link figure (src/graph/topo.h:16-17: 20.0 on 8.0, 20.6
 * from 9.0; topo.cc:563), the links being the data sheet's one-direction
 * total over 25 GB/s a link (NVLink 3 and 4; 50 for NVLink 5); over PCIe x16,
 * 16 lanes x the generation's kvDictPciGen value / 80 (topo.cc:393-395,459:
 * 24 on Gen4), which is 0.75 x the data sheet's one-direction x16 rate. */
static double nccl_gpu_bw(const est_gpu *g, int cc) {
    if (g->nvlink_gb_per_s > 0) {
        const double per_link = cc >= 100 ? 50.0 : 25.0;
        return floor(g->nvlink_gb_per_s / per_link + 0.5) * (cc >= 90 ? 20.6 : 20.0);
    }
    return 0.75 * g->pcie_gb_per_s;
}

/* src/graph/search.cc:850,855 speedArrayIntra / sm90SpeedArrayIntra. */
static const double NCCL_SPEEDS[] = {40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3};
static const double NCCL_SPEEDS_SM90[] = {60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3};

/* ncclTopoCompute on one node where every GPU has the same link (an NVSwitch
 * or each its own PCIe link): the first speed the link carries, then slower
 * ones while within half of the best found so far (search.cc:922, 991) and
 * short of the link's total (search.cc:946), keeping the most channels x speed
 * (search.cc:380, at most MAXCHANNELS/2 = 16, init.cc:1051);
 * ncclTopoDupChannels doubles them at 25 GB/s or more unless above 8.0 below
 * 50 GB/s with over 4 channels (search.cc:835-846); ncclTopoPostset doubles
 * again (connect.cc:443). */
int est_nccl_channels(const est_gpu *g) {
    if (!g) return 0;
    const int cc = nccl_cc(g);
    const double bw = nccl_gpu_bw(g, cc);
    const double *sp = cc >= 90 ? NCCL_SPEEDS_SM90 : NCCL_SPEEDS;
    const size_t n = cc >= 90 ? sizeof NCCL_SPEEDS_SM90 / sizeof *sp : sizeof NCCL_SPEEDS / sizeof *sp;
    size_t i = 0;
    while (i + 1 < n && sp[i] > bw) i++;
    int best = 0;
    double best_speed = sp[i];
    for (; i < n && (best == 0 || (sp[i] / best_speed > 0.49 && best * best_speed < bw)); i++) {
        int c = (int)(bw / sp[i]);
        if (c > EST_NCCL_TREE_CHANNELS_MAX) c = EST_NCCL_TREE_CHANNELS_MAX;
        if (c * sp[i] > best * best_speed) best = c, best_speed = sp[i];
    }
    if (best < 1) best = 1;
    if (best_speed >= 25.0 && !(cc > 80 && best_speed < 50.0 && best > 4))
        best = best * 2 < EST_NCCL_TREE_CHANNELS_MAX ? best * 2 : EST_NCCL_TREE_CHANNELS_MAX;
    return best * 2;
}

static int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

int64_t est_nccl_conn_pair_bytes(void) {
    /* without P2P read the receiver holds all three buffers, the sender only
     * its header; with it (8.0 over NVLink, paths.cc:340) the sender holds
     * Simple: 2 + 10 MiB or 6 + 6 MiB after rounding */
    const int64_t recv = align_up(EST_NCCL_CONN_HEADER_BYTES + EST_NCCL_LL_BUF_BYTES + EST_NCCL_LL128_BUF_BYTES,
                                  EST_NCCL_IPC_ALIGN_BYTES);
    const int64_t send = align_up(EST_NCCL_CONN_HEADER_BYTES + EST_NCCL_SIMPLE_BUF_BYTES, EST_NCCL_IPC_ALIGN_BYTES);
    return recv + send;
}

int64_t est_nccl_nvls_bytes(const est_gpu *g, int64_t local_ranks) {
    if (!g || g->nvlink_gb_per_s <= 0 || nccl_cc(g) < 90 || local_ranks <= 2) return 0;
    const int64_t heads = local_ranks; /* one per GPU of the node; NCCL_MAX_NVLS_ARITY is 32 */
    return (int64_t)EST_NCCL_NVLS_CHANNELS * 2 * (EST_NCCL_NVLS_BUF_BYTES + EST_NCCL_NVLS_ALIGN_BYTES) * heads;
}

int64_t est_nccl_comm_bytes(const est_gpu *g, int64_t local_ranks, int64_t nodes) {
    if (!g || local_ranks < 1 || nodes < 1 || local_ranks * nodes < 2) return 0;
    /* a ring: one pair per channel; a tree: a chain in the ring's order on a
     * node, whose interior ranks add a pair (send up, receive from below:
     * init.cc:1270-1271; the other two are the ring's, connected already) */
    const int pairs = local_ranks * nodes > 2 ? 2 : 1;
    return (int64_t)est_nccl_channels(g) * pairs * est_nccl_conn_pair_bytes() + est_nccl_nvls_bytes(g, local_ranks);
}

void est_nccl_in_force(const est_gpu *g, int64_t local_ranks, int64_t nodes, int communicators,
                       est_constants *k) {
    const int64_t one = est_nccl_comm_bytes(g, local_ranks, nodes);
    if (one <= 0 || communicators <= 0) return;
    const int id = EST_K_CUDA_CONTEXT_BYTES;
    const double before = k->value[id];
    k->value[id] = before + (double)one * communicators;
    snprintf(k->source[id], sizeof k->source[id],
             "%.0f MiB context + NCCL 2.21.5: %d communicator(s) x %.0f MiB (%d channels, NVLS %.0f MiB) "
             "(device_mem.c)",
             before / (1 << 20), communicators, (double)one / (1 << 20), est_nccl_channels(g),
             (double)est_nccl_nvls_bytes(g, local_ranks) / (1 << 20));
}
