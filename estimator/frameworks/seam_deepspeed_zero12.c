/* ZeRO stages 1 and 2 from the gradient hook to the optimizer step,
 * DeepSpeed 0.14.2 runtime/zero/stage_1_and_2.py (the same lines in 0.16.4),
 * with contiguous_gradients (the default) and one micro-batch per step.
 *
 * The weights live in one flat bit16 buffer; rank r owns the elements
 * [r*n, (r+1)*n) of it (get_data_parallel_partitions), so a parameter belongs
 * to the ranks its range meets. The seam follows one rank: run->rank when
 * given (ftest check asks for each traced rank), else the one holding the end
 * of the largest parameter that backward meets first (its gradient arrives
 * while the most activations are live), taken as the largest rank.
 *
 *  - backward() allocates the reduce bucket (ipg_buffer, reduce_bucket_size
 *    elements; a second with overlap_comm) and frees it in the epilogue.
 *  - The hook (reduce_independent_p_g_buckets_and_remove_grads): a bucket
 *    that cannot take the gradient is reduced first (reduce_ipg_grads); the
 *    gradient is copied into the bucket and autograd's tensor freed, or, when
 *    larger than the whole bucket, kept as it is (extra_large_param_to_reduce).
 *  - reduce_ipg_grads -> average_tensor: per destination rank its slices of
 *    the bucket are flattened (allreduce_bucket: a cat, none for one slice)
 *    and reduced; then each parameter of this rank's partition is copied
 *    into grads_in_partition (its elements' sum, allocated at the first copy)
 *    or, with optimizer offload, its part upcast to fp64 for the norm
 *    (set_norm_for_param_grad_in_gpu), the whole gradient tested for inf/nan
 *    (update_overflow_tracker_for_param_grad -> _has_inf_or_nan) and its part
 *    cast to fp32 for the copy to the host (async_inplace_copy_grad_to_fp32_
 *    buffer_from_gpu); stage 2 drops the gradients outside its partition.
 *  - The epilogue keeps the partition's gradients (averaged_gradients), frees
 *    the bucket and sets every .grad to None (zero_grad(set_to_none=True);
 *    0.19.8 _clear_param_grad_only), stage 1's outside the partition too.
 *  - step(): fp16's overflow check on each partition piece, the fp64 norm per
 *    piece, then flatten (c bytes per element) and .to(fp32) (4); Adam's
 *    state at its first step; the fp32 gradient dropped. With offload the
 *    step is the host's. */
#include <stdlib.h>

#include "profiles.h"
#include "seam_deepspeed.h"
#include "work.h"

/* nccl_start_alignment_factor (stage_1_and_2.py): the flat buffer is padded to
 * a multiple of 2 x W elements (4-byte alignment of fp16 partitions). */
#define NCCL_START_ALIGNMENT 2

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* This rank's part of slot's parameter: elements of [off, off + numel) in
 * [lo, hi). */
static int64_t in_partition(const ds_state *d, int slot) {
    const int64_t lo = d->flat_off[slot], hi = lo + d->slot_elems[slot];
    return max64(0, min64(hi, d->part_hi) - max64(lo, d->part_lo));
}

int ds12_layout(est_sim *s, ds_state *d) {
    const int slots = est_sim_slots(s);
    d->flat_off = calloc((size_t)slots, sizeof *d->flat_off);
    d->slot_elems = calloc((size_t)slots, sizeof *d->slot_elems);
    d->bucket_slots = malloc((size_t)(slots > 0 ? slots : 1) * sizeof *d->bucket_slots);
    if (!d->flat_off || !d->slot_elems || !d->bucket_slots) return -1;
    int64_t off = 0, largest = -1;
    /* the largest parameter the reduction meets first: the last registered
     * when hooks reduce in backward, the first when reduce_gradients walks
     * the parameters after it */
    int first = -1;
    for (int i = 0; i < d->n_refs; i++) {
        const est_param_ref *r = &d->refs[i];
        const int64_t e = est_sim_param_elems(s, r->inst, r->p);
        d->flat_off[r->slot] = off;
        d->slot_elems[r->slot] = e;
        off += e;
        if (d->reduce_after_backward ? e > largest : e >= largest) {
            largest = e;
            first = r->slot;
        }
    }
    const int64_t align = NCCL_START_ALIGNMENT * d->W;
    const int64_t part = (off + align - 1) / align * align / d->W;
    int64_t rank = first >= 0 ? (d->flat_off[first] + d->slot_elems[first] - 1) / part : 0;
    if (s->run->rank >= 0 && s->run->rank < d->W) rank = s->run->rank; /* a rank asked for */
    d->part_lo = rank * part;
    d->part_hi = d->part_lo + part;
    d->gip_elems = 0; /* grads_in_partition: whole parameters that meet the partition */
    for (int i = 0; i < d->n_refs; i++)
        if (in_partition(d, d->refs[i].slot) > 0) d->gip_elems += d->slot_elems[d->refs[i].slot];
    d->xl_grad = d->gip = d->gip_acc = -1;
    return 0;
}

void ds12_layout_free(ds_state *d) {
    free(d->flat_off);
    free(d->slot_elems);
    free(d->bucket_slots);
    d->flat_off = d->slot_elems = NULL;
    d->bucket_slots = NULL;
}

/* _has_inf_or_nan(x) of `elems` elements: x.float(), isnan, isinf (torch's
 * `abs() == inf`: an fp32 |x| beside its bool), their logical_or and its
 * .float(), all but |x| alive until the max; DeepSpeed 0.19.8 tests
 * x.amax() and x.amin() instead, two scalars (stack.h). */
void ds_has_inf_or_nan(est_sim *s, int64_t elems) {
    if (s->run->stack->ds_overflow_check_reduces) return;
    int32_t t[5];
    t[0] = est_sim_alloc(s, EST_CAT_WORKSPACE, elems * 4, "overflow check: x.float()", 0);
    t[1] = est_sim_alloc(s, EST_CAT_WORKSPACE, elems, "overflow check: isnan", 0);
    const int32_t abs = est_sim_alloc(s, EST_CAT_WORKSPACE, elems * 4, "overflow check: abs", 0);
    t[2] = est_sim_alloc(s, EST_CAT_WORKSPACE, elems, "overflow check: isinf", 0);
    est_sim_release(s, abs);
    t[3] = est_sim_alloc(s, EST_CAT_WORKSPACE, elems, "overflow check: logical_or", 0);
    t[4] = est_sim_alloc(s, EST_CAT_WORKSPACE, elems * 4, "overflow check: .float()", 0);
    for (int i = 0; i < 5; i++) est_sim_release(s, t[i]);
}

/* allreduce_bucket on `numel` elements in `slices` slices: the flatten (a
 * cat unless one slice) and, with a communication_data_type other than the
 * gradients', its .to() copy, reduced and copied back while both live
 * (stage_1_and_2.py allreduce_bucket: 0.14.2 lines 1492-1505, 0.16.4 lines
 * 1502-1515, 0.19.8 lines 2376-2389). */
static void reduce_group(est_sim *s, const ds_state *d, int64_t numel, int64_t slices) {
    if (slices == 0) return;
    const int32_t flat = slices > 1 ? est_sim_alloc(s, EST_CAT_COMM, numel * d->c, "allreduce_bucket flatten", 0) : -1;
    if (d->comm != d->c) ds_transient(s, EST_CAT_COMM, numel * d->comm, "allreduce_bucket in communication_data_type", 0);
    if (flat >= 0) est_sim_release(s, flat);
}

/* average_tensor: per destination rank, the bucket's slices that rank owns,
 * consecutive ones merged, flattened in groups of up to reduce_bucket_size
 * elements (allreduce_no_retain -> allreduce_bucket: a cat unless one slice). */
static void average_tensor(est_sim *s, ds_state *d) {
    const int64_t part = d->part_hi - d->part_lo;
    for (int64_t dst = 0; dst < d->W; dst++) {
        const int64_t lo = dst * part, hi = lo + part;
        int64_t numel = 0, slices = 0, prev = -1;
        for (int i = 0; i < d->n_bucket; i++) {
            const int slot = d->bucket_slots[i];
            const int64_t a = max64(d->flat_off[slot], lo), b = min64(d->flat_off[slot] + d->slot_elems[slot], hi);
            if (b <= a) {
                prev = -1; /* another rank's slice came between */
                continue;
            }
            if (prev != dst) slices++;
            /* a parameter's slices go in rank order: one reaching past dst
             * ends with another rank's slice */
            prev = (d->flat_off[slot] + d->slot_elems[slot] - 1) / part == dst ? dst : -1;
            numel += b - a;
            if (numel > d->bucket_elems) {
                reduce_group(s, d, numel, slices);
                numel = slices = 0;
                prev = -1;
            }
        }
        reduce_group(s, d, numel, slices);
    }
}

/* copy_grads_in_partition for one parameter of this rank's partition. */
static void copy_in_partition(est_sim *s, ds_state *d, int slot, int64_t part) {
    if (d->offload) {
        ds_transient(s, EST_CAT_WORKSPACE, part * 8, "gradient norm fp64", 0);
        ds_has_inf_or_nan(s, d->slot_elems[slot]);
        ds_transient(s, EST_CAT_WORKSPACE, part * 4, "fp32 gradient for the host", 0);
        return;
    }
    if (d->gip < 0) d->gip = est_sim_alloc(s, EST_CAT_GRADS, d->gip_elems * d->c, "grads_in_partition", 0);
}

/* reduce_ipg_grads: the bucket (or the extra-large gradient) reduced, this
 * rank's parameters copied out, the extra-large gradient dropped where its
 * .grad is cleared (offload, or stage 2 outside the partition). */
static void flush(est_sim *s, ds_state *d) {
    if (d->n_bucket == 0) return;
    average_tensor(s, d);
    for (int i = 0; i < d->n_bucket; i++) {
        const int slot = d->bucket_slots[i];
        const int64_t part = in_partition(d, slot);
        if (part > 0) copy_in_partition(s, d, slot, part);
        /* in the partition its .grad becomes the copy (or None with offload);
         * outside it stage 2 clears it, stage 1 keeps it to the epilogue */
        const bool cleared = part > 0 || s->run->zero_stage == 2;
        if (slot == d->xl_slot && d->xl_grad >= 0 && cleared) {
            est_sim_release(s, d->xl_grad);
            d->xl_grad = -1;
        }
    }
    d->n_bucket = 0;
    d->in_bucket = 0;
}

/* An extra-large gradient left as its parameter's .grad, freed at the epilogue. */
static void park(ds_state *d, int slot, int32_t grad) {
    d->grad[slot] = grad;
}

/* The gradients parked outside the partition, freed. */
static void release_parked(est_sim *s, ds_state *d) {
    for (int i = 0; i < d->n_refs; i++) {
        const int slot = d->refs[i].slot;
        if (d->grad[slot] >= 0 && in_partition(d, slot) == 0) {
            est_sim_release(s, d->grad[slot]);
            d->grad[slot] = -1;
        }
    }
}

void ds12_grad(est_sim *s, ds_state *d, int slot, int32_t grad) {
    const int64_t elems = d->slot_elems[slot];
    if (d->in_bucket + elems > d->bucket_elems) flush(s, d);
    if (elems > d->bucket_elems) { /* stays autograd's tensor until its .grad is cleared */
        /* not cleared by the flush: stage 1's gradient outside the partition,
         * still its parameter's .grad until the epilogue sets it to None */
        if (d->xl_grad >= 0) park(d, d->xl_slot, d->xl_grad);
        d->xl_grad = grad;
        d->xl_slot = slot;
    } else {
        est_sim_release(s, grad); /* grad_reduc.data = its copy in the bucket */
    }
    d->bucket_slots[d->n_bucket++] = slot;
    d->in_bucket += elems;
}

/* backward() (0.14.2, 0.16.4) or setup_buckets (0.18.1, 0.19.8): the
 * buckets of an earlier micro-batch, if any, are dropped first (`self.
 * ipg_buffer = []`, stage_1_and_2.py 0.16.4 line 2049) and new ones made. */
void ds12_backward_begin(est_sim *s, ds_state *d) {
    for (int64_t b = 0; b < d->buckets; b++) {
        est_sim_release(s, d->bucket_ids[b]);
        d->bucket_ids[b] = est_sim_alloc(s, EST_CAT_COMM, d->bucket_elems * d->c, "ipg bucket", 0);
    }
}

/* What the micro-batches before the accumulation boundary leave on the
 * device, at the boundary micro-batch's start (with contiguous_gradients):
 *  - stage 1: the reduce buckets of the last backward. Nothing releases them
 *    before the boundary: engine.py allreduce_gradients runs the epilogue
 *    (whose _release_ipg_buffers frees them) at stage 1 only at the boundary
 *    (0.16.4 lines 2052-2059, 0.19.8 3085-3092); 0.14.2 and 0.16.4 drop them
 *    at the next backward(), 0.18.1 and 0.19.8 keep them, setup_buckets
 *    doing nothing while ready_for_gradients stays True (0.19.8 line 3257).
 *  - stage 2 without offload: an earlier micro-batch's grads_in_partition.
 *    The epilogue runs at every micro-batch and keeps views of it (the
 *    partition's .grad, which copy_grads_in_partition made views of it):
 *    averaged_gradients = get_flat_partition(..., return_tensor_list=True)
 *    in 0.14.2 and 0.16.4 (lines 783-790 of 0.16.4), all_grad_tensors in
 *    0.18.1 (lines 855-857) and 0.19.8 (lines 1037-1039). The next
 *    micro-batch copies into a new grads_in_partition (allocated at its
 *    first copy, _release_ipg_buffers having set the old to None); its
 *    epilogue adds it in place into the kept views (0.16.4 line 800) or,
 *    in 0.18.1, replaces them, and keeps one of the two: two are live from
 *    the boundary micro-batch's first copy to its epilogue, one after. */
void ds12_accumulated(est_sim *s, ds_state *d) {
    if (s->run->grad_accum <= 1) return;
    if (s->run->zero_stage == 1)
        for (int64_t b = 0; b < d->buckets; b++)
            if (d->bucket_ids[b] < 0)
                d->bucket_ids[b] = est_sim_alloc(s, EST_CAT_COMM, d->bucket_elems * d->c, "ipg bucket", 0);
    if (s->run->zero_stage == 2 && !d->offload && d->gip_acc < 0)
        d->gip_acc = est_sim_alloc(s, EST_CAT_GRADS, d->gip_elems * d->c, "averaged_gradients", 0);
}

/* independent_gradient_partition_epilogue: the last bucket, then the buckets
 * (_release_ipg_buffers) and every parameter's .grad (`p.grad = None`): the
 * epilogue ends in self.zero_grad(set_to_none=True) in 0.14.2 (line 795),
 * 0.16.4 (line 807) and 0.18.1 (line 879), in _clear_param_grad_only() in 0.19.8
 * (line 1067). What survives is what averaged_gradients views, the
 * partition's gradients (get_flat_partition narrows each parameter's .grad,
 * which copy_grads_in_partition made a view of grads_in_partition). So a
 * stage-1 gradient outside the partition is gone before step() runs:
 * step()'s free_grad_in_param_list(params_not_in_partition) finds None. */
void ds12_epilogue(est_sim *s, ds_state *d) {
    flush(s, d);
    for (int b = 0; b < 2; b++) {
        est_sim_release(s, d->bucket_ids[b]);
        d->bucket_ids[b] = -1;
    }
    if (d->gip_acc >= 0) { /* added into the earlier micro-batches' views, then dropped */
        est_sim_release(s, d->gip);
        d->gip = d->gip_acc;
        d->gip_acc = -1;
    }
    if (d->xl_grad >= 0) park(d, d->xl_slot, d->xl_grad);
    d->xl_grad = -1;
    release_parked(s, d);
}

/* step() without offload: the overflow check and the fp64 norm on each
 * partition piece (no .grad outside the partition is left: the epilogue
 * cleared them), the flattened fp32 gradient; grads_in_partition goes when
 * averaged_gradients is dropped, before the optimizer runs (with the HF
 * Trainer's two groups, after the first group's step). */
void ds12_step(est_sim *s, ds_state *d) {
    if (s->run->precision == EST_PREC_FP16_MIXED) {
        est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer: fp16 overflow check");
        est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
        for (int i = 0; i < d->n_refs; i++) {
            const int64_t part = in_partition(d, d->refs[i].slot);
            if (part > 0) ds_has_inf_or_nan(s, part);
        }
    }
    est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer: gradient norm (fp64)");
    if (s->run->precision != EST_PREC_FP16_MIXED) est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
    for (int i = 0; i < d->n_refs; i++)
        ds_transient(s, EST_CAT_WORKSPACE, in_partition(d, d->refs[i].slot) * 8, "gradient norm fp64", 0);
    est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer: flatten + fp32 gradients");
    const int64_t n = d->part_hi - d->part_lo;
    const int32_t f32 = ds_to_fp32(s, d, EST_CAT_GRADS, n, "flattened gradients", "fp32 gradients");
    const bool held = ds12_two_groups(s, d);
    if (!held) est_sim_release(s, d->gip);
    ds_optimizer_step(s, d, n, s->first_step);
    est_sim_release(s, f32);
    if (held) est_sim_release(s, d->gip);
    d->gip = -1;
}
