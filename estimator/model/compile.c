/* AOTAutograd's min-cut partition of a block (compile.h), on the block
 * description: a flow network over its tensors (each tensor t an edge
 * t_in -> t_out weighted by the cost of saving it), solved by Edmonds-Karp;
 * the saturated tensor edges reachable from the source are the cut. */
#include "compile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define INF 1e30

/* Ops inductor can fuse (the partitioner's fusible_ops): everything but the
 * matmuls, attention kernels and the custom ops of other libraries. */
static bool fusible(est_op_kind k) {
    switch (k) {
    case EST_OP_LINEAR:
    case EST_OP_BMM:
    case EST_OP_ATTENTION:
    case EST_OP_DEQUANT:
    case EST_OP_FUSED_LOSS:
    case EST_OP_EMBEDDING:
    case EST_OP_LOSS: return false;
    default: return true;
    }
}

static bool reads(const est_mop *o, int t) {
    for (int k = 0; k < o->n_in; k++)
        if (o->in[k] == t) return true;
    return false;
}

/* Op j's backward reads tensor t (eager's saves; the joint graph's backward
 * reads the same). */
static bool backward_reads(const est_mop *o, int t) {
    for (int k = 0; k < o->n_in; k++)
        if (o->in[k] == t && o->saves[k]) return true;
    return (o->out == t && o->saves_out) || (o->out2 == t && o->saves_out2);
}

/* Some reader of t, forward or backward, cannot fuse with it. */
static bool read_unfused(const est_module *m, int t, bool backward_only) {
    for (int j = 0; j < m->n_ops; j++) {
        const est_mop *o = &m->ops[j];
        if (fusible(o->kind)) continue;
        if (backward_reads(o, t) || (!backward_only && reads(o, t))) return true;
    }
    return false;
}

/* should_ban_recomputation and the primals. */
static bool banned(const est_module *m, int t) {
    const est_mtensor *x = &m->tensors[t];
    if (x->producer < 0) return true; /* an input */
    const est_mop *o = &m->ops[x->producer];
    if (!fusible(o->kind) || o->kind == EST_OP_DROPOUT) return true;
    if (o->kind == EST_OP_REDUCE) {
        int64_t in = 0;
        for (int k = 0; k < o->n_in; k++)
            if (o->in[k] >= 0) in += est_mtensor_bytes(&m->tensors[o->in[k]]);
        if (est_mtensor_bytes(x) * 4 < in) return true;
    }
    return read_unfused(m, t, true); /* materialized in backward */
}

typedef struct net {
    int n;
    double *cap; /* n x n residual capacities */
} net;

static void edge(net *g, int a, int b, double c) { g->cap[(size_t)a * (size_t)g->n + (size_t)b] += c; }

/* Edmonds-Karp: augment along shortest paths until none is left; `seen`
 * ends as the source's side of the cut. */
static void max_flow(net *g, int s, int k, int *prev, bool *seen, int *queue) {
    for (;;) {
        memset(seen, 0, (size_t)g->n * sizeof *seen);
        int head = 0, tail = 0;
        queue[tail++] = s;
        seen[s] = true;
        while (head < tail && !seen[k]) {
            const int u = queue[head++];
            for (int v = 0; v < g->n; v++)
                if (!seen[v] && g->cap[(size_t)u * (size_t)g->n + (size_t)v] > 0) {
                    seen[v] = true;
                    prev[v] = u;
                    queue[tail++] = v;
                }
        }
        if (!seen[k]) return;
        double f = INF;
        for (int v = k; v != s; v = prev[v]) f = fmin(f, g->cap[(size_t)prev[v] * (size_t)g->n + (size_t)v]);
        if (f >= INF) return; /* an infinite path: cannot happen (a saved input is weighted) */
        for (int v = k; v != s; v = prev[v]) {
            g->cap[(size_t)prev[v] * (size_t)g->n + (size_t)v] -= f;
            g->cap[(size_t)v * (size_t)g->n + (size_t)prev[v]] += f;
        }
    }
}

/* Distance in ops from the backward (dist_from_bw): 1 for a tensor the
 * backward reads, else one more than its nearest reader's output. */
static void distances(const est_module *m, double *dist) {
    for (int t = m->n_tensors - 1; t >= 0; t--) {
        dist[t] = m->tensors[t].saved_until >= 0 ? 1 : 1e9;
        for (int j = 0; j < m->n_ops; j++) {
            const est_mop *o = &m->ops[j];
            if (!reads(o, t)) continue;
            if (o->out > t) dist[t] = fmin(dist[t], dist[o->out] + 1);
            if (o->out2 > t) dist[t] = fmin(dist[t], dist[o->out2] + 1);
        }
    }
}

static double weight(const est_module *m, int t, double dist) {
    const bool materialized = m->tensors[t].producer < 0 || read_unfused(m, t, false);
    const double w = (double)est_mtensor_bytes(&m->tensors[t]) * pow(1.1, fmax(1, fmin(dist, 100)));
    return materialized ? w : 2 * w;
}

static void build(const est_module *m, net *g, const double *dist) {
    const int S = 2 * m->n_tensors, K = S + 1;
    for (int t = 0; t < m->n_tensors; t++) {
        edge(g, 2 * t, 2 * t + 1, weight(m, t, dist[t]));
        if (banned(m, t)) edge(g, S, 2 * t, INF);
        if (m->tensors[t].saved_until >= 0) edge(g, 2 * t + 1, K, INF);
    }
    for (int j = 0; j < m->n_ops; j++) {
        const est_mop *o = &m->ops[j];
        for (int k = 0; k < o->n_in; k++) {
            if (o->in[k] < 0) continue;
            if (o->out >= 0) edge(g, 2 * o->in[k] + 1, 2 * o->out, INF);
            if (o->out2 >= 0) edge(g, 2 * o->in[k] + 1, 2 * o->out2, INF);
        }
    }
}

/* The first forward op that reads t, or its producer when none does. */
static int16_t first_reader(const est_module *m, int t) {
    for (int j = 0; j < m->n_ops; j++)
        if (reads(&m->ops[j], t)) return (int16_t)j;
    return m->tensors[t].producer;
}

int64_t est_compile_partition(est_module *m) {
    net g = {.n = 2 * m->n_tensors + 2};
    g.cap = calloc((size_t)g.n * (size_t)g.n, sizeof *g.cap);
    double *dist = malloc((size_t)m->n_tensors * sizeof *dist);
    int *prev = malloc((size_t)g.n * sizeof *prev), *queue = malloc((size_t)g.n * sizeof *queue);
    bool *seen = malloc((size_t)g.n * sizeof *seen);
    int64_t saved = -1;
    if (g.cap && dist && prev && queue && seen) {
        distances(m, dist);
        build(m, &g, dist);
        max_flow(&g, g.n - 2, g.n - 1, prev, seen, queue);
        saved = 0;
        for (int t = 0; t < m->n_tensors; t++) {
            est_mtensor *x = &m->tensors[t];
            const bool cut = seen[2 * t] && !seen[2 * t + 1];
            if (!cut) {
                x->saved_until = EST_NONE;
                continue;
            }
            if (x->saved_until < 0) x->saved_until = first_reader(m, t);
            saved += est_mtensor_bytes(x);
        }
    }
    free(g.cap);
    free(dist);
    free(prev);
    free(queue);
    free(seen);
    return saved;
}

/* The fused forward writes t to memory: something needs it whole. */
static bool written(const est_module *m, int t) {
    const est_mtensor *x = &m->tensors[t];
    if (x->producer < 0 || !fusible(m->ops[x->producer].kind)) return false;
    return x->saved_until >= 0 || t == m->output || x->held || read_unfused(m, t, false);
}

double est_compile_elementwise_bytes(const est_module *m, double *kernels) {
    double bytes = 0, n = 0;
    for (int t = 0; t < m->n_tensors; t++) {
        const est_mtensor *x = &m->tensors[t];
        if (written(m, t)) {
            bytes += (double)est_mtensor_bytes(x);
            n++;
        }
        const bool in_memory = x->producer < 0 || !fusible(m->ops[x->producer].kind) || written(m, t);
        bool fused_reader = false;
        for (int j = 0; j < m->n_ops && !fused_reader; j++)
            fused_reader = fusible(m->ops[j].kind) && reads(&m->ops[j], t);
        if (in_memory && fused_reader) bytes += (double)est_mtensor_bytes(x);
    }
    for (int p = 0; p < m->n_params; p++) { /* norm weights, autocast's weight casts */
        bool fused_reader = false;
        for (int j = 0; j < m->n_ops && !fused_reader; j++)
            fused_reader = fusible(m->ops[j].kind) && reads(&m->ops[j], EST_PARAM(p));
        if (fused_reader) bytes += (double)(m->params[p].rows * m->params[p].cols * m->params[p].copies *
                                            m->params[p].elem_bytes);
    }
    *kernels = n;
    return bytes;
}
