/* What the time ledger needs of FSDP2's embedding and LM-head units
 * (fsdp_ends.h); the hooks that make them are seam_fsdp_ends.c's. */
#include "fsdp_ends.h"

/* torch.chunk(h, 8, dim=1) makes ceil(s / ceil(s / 8)) chunks. */
int64_t est_fsdp_head_calls(const est_run *run) {
    if (run->loss != EST_LOSS_CHUNKED_OUTPUT) return 1;
    const int64_t per = (run->seq_len + 7) / 8;
    return per > 0 ? (run->seq_len + per - 1) / per : 1;
}

/* Against the root unit (gathered once per micro-batch, reduced once): under
 * reshard_after_forward (--zero 3) the embedding is gathered again for its
 * backward, the head at each of its n calls in forward and in backward (2n);
 * without it the head stays gathered from its first call to its first
 * backward call, whose post-backward reshards it (reshard_after_backward),
 * so its other n - 1 calls gather it again. Each backward call reduce-scatters
 * its share (n), at the last micro-batch only (no_sync: reduce_grads false). */
void est_fsdp_ends_wire(const est_run *run, double head, double embed, double head_reduced, double *gathered,
                        double *reduced) {
    *gathered = *reduced = 0;
    if (!run->fsdp_shard_ends || run->fsdp_version != EST_FSDP2 || run->zero_stage < 2) return;
    const double n = (double)est_fsdp_head_calls(run);
    *gathered = run->zero_stage == 3 ? (2 * n - 1) * head + embed : (n - 1) * head;
    *reduced = (n - 1) * head_reduced;
}
