/* What both FSDP versions read of the units (seam_fsdp.h): the order in
 * which they are gathered, and the bytes per element of their shards. The
 * seam (seam_fsdp.c) and each version (seam_fsdp1.c, seam_fsdp2.c) call it;
 * it calls none of them. */
#include "seam_fsdp.h"

int fsdp_next_forward(const est_sim *s, int u) { return u < s->L ? u + 1 : -1; }

int fsdp_next_backward(const est_sim *s, int u) {
    if (u == 0) return (int)s->L;
    return u > 1 && u <= s->L ? u - 1 : -1;
}

int fsdp_param_elem_bytes(const est_sim *s, const fsdp_state *f, const fsdp_param *q) {
    return est_sim_param(s, q->inst, q->p)->trainable ? f->w : f->c;
}

int fsdp_unit_elem_bytes(const est_sim *s, const fsdp_state *f, int u) {
    const fsdp_unit *x = &f->units[u];
    return x->count > 0 ? fsdp_param_elem_bytes(s, f, &f->params[x->first]) : f->w;
}
