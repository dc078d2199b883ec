"""The storage tracker of `make cpu-truth`: every tensor storage a training
step creates, followed from birth to death on the CPU, as the CUDA caching
allocator would be asked for it.

A TorchDispatchMode sees each aten op; every storage an op's outputs hold that
is not yet known is counted, rounded up to 512 bytes as the CUDA caching
allocator rounds each request (c10/cuda/CUDACachingAllocator.cpp, kMinBlockSize
= 512, round_size; torch 2.15), and dropped when its StorageImpl dies (a weak
reference on the storage's preserved Python object, whose callback runs at the
StorageImpl's destruction). `UntypedStorage.resize_`, which FSDP1 and FSDP2 use
to free and re-allocate their unsharded parameters without an op
(torch/distributed/fsdp/_flat_param.py `_free_storage`, `_alloc_storage`;
torch/distributed/fsdp/_fully_shard/_fsdp_param.py `free_storage`,
`alloc_storage`), is wrapped while the tracker is active. DTensor ops return
NotImplemented here, so DTensor runs its own dispatch and the local tensor ops
it issues come back through this mode (what FSDP2's shards really allocate).

What this cannot see, by construction: the caching allocator's reserve,
segments and fragmentation, the CUDA context, library workspaces (cuBLAS,
cuDNN, NCCL), a kernel's internal scratch, CUDA-only kernels (flash attention,
bitsandbytes), streams, offload and time. docs/validation.md lists them.

No torch import at module level: the runner imports this after it has chosen
its environment (DeepSpeed's accelerator, the fake process group)."""

import weakref

ROUND_BYTES = 512  # CUDACachingAllocator.cpp kMinBlockSize (torch 2.15)


def rounded(nbytes):
    """Bytes the CUDA caching allocator hands out for a request of nbytes
    (round_size: multiples of 512; a zero-byte request allocates nothing)."""
    if nbytes <= 0:
        return 0
    return (nbytes + ROUND_BYTES - 1) // ROUND_BYTES * ROUND_BYTES


def make_tracker():
    """The tracker class, built on first use so that torch loads late."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch < 2.4
        DTensor = None
    from torch._subclasses.fake_tensor import FakeTensor

    def decomposes(t):
        # DTensor (and any other wrapper subclass but FakeTensor, which DTensor's
        # own sharding propagation runs) dispatches itself into local ops.
        return (DTensor is not None and issubclass(t, DTensor)) or (
            t not in (torch.Tensor, torch.nn.Parameter) and not issubclass(t, FakeTensor)
            and hasattr(t, "__tensor_flatten__"))

    class StorageTracker(TorchDispatchMode):
        """Live bytes per storage; peaks per phase; the live set at the peak.

        phase: set by the runner ("init", "forward", "backward", "optimizer");
        where: a finer label ("forward layer 3") set by the boundary hooks."""

        def __init__(self):
            super().__init__()
            self.live = {}        # StorageImpl address -> [bytes, phase, where, op, birth]
            self.refs = {}        # address -> weakref (keeps the callback alive)
            self.cur = 0
            self.peak = 0
            self.peak_phase = "init"
            self.peak_where = "init"
            self.phase = "init"
            self.where = "init"
            self.phase_peak = {}
            self.boundaries = []  # [phase, layer, live bytes]
            self.window = -1      # peak since open_window (-1: no window open)
            self.window_peaks = {}  # layer -> peak of its backward window
            self.window_layer = -1
            self.snapshot = None  # the live set at the peak, taken lazily
            self.pending = False  # a new peak has not been snapshotted yet
            self.ops_seen = set()
            self.births = 0
            self.events = 0
            self._orig_resize = None

        # -- storage accounting -------------------------------------------
        def _grow(self):
            c = self.cur
            if self.window >= 0 and c > self.window:
                self.window = c
            if c > self.phase_peak.get(self.phase, -1):
                self.phase_peak[self.phase] = c
            if c > self.peak:
                self.peak = c
                self.peak_phase = self.phase
                self.peak_where = self.where
                self.pending = True

        def _before_shrink(self):
            # The live set just before the first free after a new peak is the
            # live set at that peak: only allocations came in between.
            if self.pending:
                self.snapshot = {k: tuple(v) for k, v in self.live.items()}
                self.pending = False

        def _dead(self, key, _ref=None):
            item = self.live.get(key)
            if item is None:
                return
            self._before_shrink()
            self.cur -= item[0]
            del self.live[key]
            self.refs.pop(key, None)
            self.events += 1

        def add_storage(self, st, op):
            key = st._cdata
            if key in self.live:
                return
            nbytes = rounded(st.nbytes())
            self.births += 1  # an address is reused after a death: the birth tells them apart
            self.live[key] = [nbytes, self.phase, self.where, op, self.births]
            try:
                self.refs[key] = weakref.ref(st, lambda r, k=key: self._dead(k))
            except TypeError:
                pass
            self.cur += nbytes
            self.events += 1
            self._grow()

        def add_tensor(self, t, op):
            if DTensor is not None and isinstance(t, DTensor):
                t = t._local_tensor
            if isinstance(t, FakeTensor) or t.device.type == "meta":
                return
            try:
                st = t.untyped_storage()
            except (RuntimeError, NotImplementedError):
                return
            self.add_storage(st, op)

        def resized(self, st, nbytes_new):
            key = st._cdata
            item = self.live.get(key)
            if item is None:
                self.add_storage(st, "resize_")
                return
            new = rounded(nbytes_new)
            if new < item[0]:
                self._before_shrink()
            self.cur += new - item[0]
            item[0] = new
            item[1], item[2], item[3] = self.phase, self.where, "resize_"
            self.events += 1
            if new > 0:
                self._grow()

        # -- the mode -----------------------------------------------------
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(decomposes(t) for t in types):
                return NotImplemented  # DTensor and others: their local ops come back here
            out = func(*args, **(kwargs or {}))
            name = func.__name__ if hasattr(func, "__name__") else str(func)
            if "scaled_dot_product" in name or "flash" in name:
                self.ops_seen.add(str(func))
            leaves, _ = tree_flatten(out)
            for t in leaves:
                if isinstance(t, torch.Tensor):
                    self.add_tensor(t, name)
            return out

        def __enter__(self):
            tracker = self
            orig = torch.UntypedStorage.resize_
            self._orig_resize = orig

            def resize_(st, size):
                r = orig(st, size)
                tracker.resized(st, st.nbytes())
                return r

            torch.UntypedStorage.resize_ = resize_
            return super().__enter__()

        def __exit__(self, *exc):
            torch.UntypedStorage.resize_ = self._orig_resize
            return super().__exit__(*exc)

        # -- what the runner reads ----------------------------------------
        def set_phase(self, phase, where=None):
            self.phase = phase
            self.where = where or phase

        def boundary(self, phase, layer):
            self.boundaries.append([phase, layer, self.cur])

        def open_window(self, layer, where):
            """Starts block `layer`'s window, whose own peak close_window records."""
            self.where = where
            self.window = self.cur
            self.window_layer = layer

        def close_window(self, layer):
            if self.window >= 0 and self.window_layer == layer:
                self.window_peaks[layer] = max(self.window, self.window_peaks.get(layer, 0))
                self.window = -1

        def reset_peaks(self):
            """Forget the peaks so far (the runner's warm-up); the live set stays."""
            self.peak = self.cur
            self.peak_phase, self.peak_where = self.phase, self.where
            self.phase_peak = {}
            self.boundaries = []
            self.snapshot = None
            self.pending = True

        def peak_live(self):
            """The live set at the peak: {address: (bytes, phase, where, op, birth)}."""
            if self.pending:
                return {k: tuple(v) for k, v in self.live.items()}
            return self.snapshot or {}

    return StorageTracker
