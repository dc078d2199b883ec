"""What the probe notes per optimizer step, beside its wall time: whether
DeepSpeed skipped the step for a gradient overflow, whether a micro-batch of
the step had padding, and the caching allocator's counters after steps 1, 2
and the last (docs/records.md, "Per step").

No import of torch or a framework: the runners (probe_run.py) hand in
callables that read them, so the bookkeeping is tested on the CPU with plain
values (calibrate/probes/test_probe_steps.py).

Why (docs/validation.md): the 0.5B sequence sweeps' reserved peak follows the
history of the first steps (an fp16 step skipped by DeepSpeed's loss scaler,
an unpadded batch), which no record said (qwenseq); the allocator's replay
can only be compared step by step with its counters after each step
(qwenseq, fsdpres2); the host's time per point varies between sittings by
more than the residual, so every step's time is kept, not only the median
(hf1gpu).
"""

import statistics

# memory_stats() keys (torch/cuda/memory.py, torch 2.11: "<stat>.all.current"
# and ".all.peak" for the pool of every size) under the names a record gives
# them; peaks are since the run's reset_peak_memory_stats().
MEMORY_STEP_BYTES = (
    ("allocated_bytes", "allocated_bytes.all.current"),
    ("active_bytes", "active_bytes.all.current"),
    ("reserved_bytes", "reserved_bytes.all.current"),
    ("peak_allocated_bytes", "allocated_bytes.all.peak"),
    ("peak_active_bytes", "active_bytes.all.peak"),
    ("peak_reserved_bytes", "reserved_bytes.all.peak"),
)
# Counters since the process began (reset_peak_memory_stats leaves them):
# cudaMalloc calls that failed and were retried after freeing the cache,
# cudaMalloc and cudaFree calls (torch 2.11 CUDACachingAllocator.cpp).
MEMORY_STEP_COUNTS = ("num_alloc_retries", "num_device_alloc", "num_device_free")


def sampled_steps(n_steps):
    """The steps (1-based) after which the allocator is read: 1, 2 and the last."""
    return sorted({s for s in (1, 2, n_steps) if 1 <= s <= n_steps})


def memory_entry(step, stats):
    """One `memory_by_step` entry from a memory_stats() dict: the step and
    each figure the dict has (a torch without a key leaves it out)."""
    entry = {"step": step}
    for name, key in MEMORY_STEP_BYTES + tuple((c, c) for c in MEMORY_STEP_COUNTS):
        v = stats.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            entry[name] = v
    return entry


def median_after_warmup(times, warmup):
    """The record's step_time_s: the median of the steps after the first
    `warmup`; None when none is left."""
    steady = list(times)[warmup:]
    return statistics.median(steady) if steady else None


class StepLog:
    """Per-step notes of one run, fed by the runner's step callbacks.

    steps: the optimizer steps the run takes (the last is sampled);
    memory_stats: a callable returning torch.cuda.memory_stats(), or None (CPU);
    skipped_steps: a callable returning DeepSpeed's engine.skipped_steps (the
    count it raises when the optimizer reports an overflow), or None where the
    run has no loss scaler to skip a step.
    """

    def __init__(self, steps, memory_stats=None, skipped_steps=None):
        self.steps, self.memory_stats, self.skipped_steps = steps, memory_stats, skipped_steps
        self.done, self.overflow, self.masks, self.memory = 0, [], [], []
        self._skipped_before, self._masks_now = None, []

    def begin(self):
        """At the step's start (before its first micro-batch)."""
        self._masks_now = []
        if self.skipped_steps is not None:
            self._skipped_before = self.skipped_steps()

    def note_mask(self, has_zero):
        """A micro-batch's attention mask: None when the batch had none (no
        padding), else whether it had a zero, as a bool or as a 0-d device
        tensor read only at the end (no host sync inside the timed step)."""
        self._masks_now.append(has_zero)

    def end(self):
        """At the step's end, after the device was synchronised and the
        step's time taken."""
        self.done += 1
        if self.skipped_steps is not None and self._skipped_before is not None:
            self.overflow.append(self.skipped_steps() > self._skipped_before)
        self.masks.append(self._masks_now)
        self._masks_now = []
        if self.memory_stats is not None and self.done in sampled_steps(self.steps):
            self.memory.append(memory_entry(self.done, self.memory_stats()))

    def step_padded(self):
        """Per step: whether any micro-batch's mask had a zero."""
        return [any(bool(m) for m in step if m is not None) for step in self.masks]

    def fields(self):
        """What the run adds to the record's description (probe_record.make_record):
        step_overflow where a loss scaler was watched, step_padded, and
        memory_by_step (for the rank) where the allocator was read."""
        out = {"step_padded": self.step_padded()}
        if self.skipped_steps is not None:
            out["step_overflow"] = list(self.overflow)
        if self.memory:
            out["memory_by_step"] = list(self.memory)
        return out


def ds_skipped_steps(trainer):
    """A callable reading DeepSpeed's skipped-step count from the Trainer's
    engine (trainer.model_wrapped once train() wrapped it): DeepSpeed 0.19.8
    runtime/engine.py _take_model_step sets overflow = optimizer.overflow
    (FP16_Optimizer, ZeRO stage_1_and_2.py and stage3.py keep it) and adds one
    to engine.skipped_steps when it is true, instead of stepping. 0 before
    the engine exists."""
    def read():
        engine = getattr(trainer, "model_wrapped", None)
        n = getattr(engine, "skipped_steps", 0)
        return n if isinstance(n, int) else 0
    return read


def mask_hook(log):
    """A forward pre-hook (register_forward_pre_hook(..., with_kwargs=True))
    on the model the Trainer calls: notes whether the batch's attention mask
    has a zero. The comparison stays on the device (a 0-d tensor read at the
    end), so the hook adds one small kernel and no host sync to a padded step,
    nothing to an unpadded one (no mask: the probe's own batches)."""
    def hook(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        log.note_mask(None if mask is None else (mask == 0).any())
    return hook
