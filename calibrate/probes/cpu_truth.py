#!/usr/bin/env python3
"""cpu_truth.py: real DDP, DeepSpeed, FSDP1, FSDP2 and PEFT training steps,
traced storage by storage on the CPU, one process posing as rank r of N, over
the matrix of cpu_truth_matrix.py; one `ftest.record/1` line per
configuration and rank (docs/records.md, "cpu-trace").

    cpu_truth.py --out FILE [--shard I/K] [--only SUBSTRING] [--list]
    cpu_truth.py --point NAME --rank R [--out FILE]   (one point, alone)

Every configuration runs in this one process, except those that
`fresh_process` names (ZeRO-3 without zero.Init), each of which runs in a
process of its own (this script again, `--point NAME --rank R`), because
zero.Init leaves torch.nn.functional.linear replaced for the rest of the
process (DeepSpeed runtime/zero/partition_parameters.py, 0.14.2 to 0.19.8:
"This will persist unless manually reset").
(On this stack deepspeed.initialize installs the same wrapper on the
no-zero.Init path itself, Init.__init__ with module=, DeepSpeed PR #8189;
0.14.2 and 0.16.4 do not: only a fresh process tells the two apart.)
In each process torch.distributed is
initialised with the `fake` backend as rank r of N (collectives return at once,
every tensor has rank r's shapes), the framework is set up under the storage
tracker (cpu_trace.py) from the model's construction on, and two optimizer
steps run (the second holds the optimizer state). The record holds the peak of
live bytes over both steps, the peak of each phase, the live bytes at each
decoder layer's boundary in the second step's forward and backward, and the
largest groups of what was live at the peak, with their names.
"""

import argparse
import datetime
import gc
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cpu_trace  # noqa: E402
import cpu_truth_matrix as matrix  # noqa: E402
import probe_record as pr  # noqa: E402

RUNNER_VERSION = "2"  # 2: ZeRO-3 without zero.Init in a fresh process each
STEPS = 2
TOP_AT_PEAK = 12
FRAMEWORK_OF = {"ddp": "hf", "deepspeed": "deepspeed", "fsdp1": "fsdp", "fsdp2": "fsdp"}


def versions():
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "accelerate", "deepspeed", "peft", "bitsandbytes"):
        try:
            out[name] = getattr(__import__(name), "__version__", "unknown")
        except Exception:  # absent or broken: recorded as absent
            out[name] = None
    import torch
    out["cuda"] = torch.version.cuda
    return out


def fresh_process(c):
    """A point that must be traced in a process where zero.Init never ran:
    ZeRO-3 without zero.Init, whose model is built with torch's own
    constructors and torch's own linear, and gets whatever deepspeed.initialize
    then does to it, nothing left over from an earlier zero.Init."""
    return c["framework"] == "deepspeed" and c["zero"] == 3 and not c["zero_init"]


def enters_zero_init(c):
    """A point whose set-up enters deepspeed.zero.Init (cpu_truth_setups.py)."""
    return c["framework"] == "deepspeed" and c["zero"] == 3 and c["zero_init"]


def schedule(points):
    """The order and the process of every (point, rank): ("here", c, r) runs in
    the runner's process in matrix order, ("fresh", c, r) in a new process of
    its own started just then (run_fresh)."""
    return [("fresh" if fresh_process(c) else "here", c, r) for c, r in points]


def check_torch_linear(c):
    """Refuses to trace a fresh_process point where torch.nn.functional.linear
    is not torch's own (a zero.Init ran before in this process)."""
    import torch
    if fresh_process(c) and torch.nn.functional.linear is not torch._C._nn.linear:
        raise RuntimeError(f"torch.nn.functional.linear is {torch.nn.functional.linear!r}, "
                           "not torch's own: a zero.Init ran before in this process")


def restore_torch_linear(c):
    """Gives a point of another framework torch's own linear back: DeepSpeed
    0.19.8 leaves torch.nn.functional.linear as zero3_linear_wrap after
    zero.Init or deepspeed.initialize (partition_parameters.py), and its
    LinearFunctionForZeroStage3 saves a frozen Linear's input as if its weight
    trained (LoRA's frozen base traced too large under FSDP)."""
    import torch
    if c["framework"] != "deepspeed" and torch.nn.functional.linear is not torch._C._nn.linear:
        torch.nn.functional.linear = torch._C._nn.linear


def init_rank(rank, world):
    """torch.distributed as rank r of N with the fake backend (a fresh group)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        dist.destroy_process_group()
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0",
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT="29531")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    if "deepspeed" in sys.modules:
        reset_deepspeed_groups()


def reset_deepspeed_groups():
    """DeepSpeed keeps its communication backend and its groups in module
    globals (deepspeed/comm/comm.py cdb, deepspeed/utils/groups.py); a new
    fake world needs them forgotten."""
    sys.modules["deepspeed.comm.comm"].cdb = None
    groups = sys.modules.get("deepspeed.utils.groups")
    if groups is None:
        return
    for k, v in list(vars(groups).items()):
        if not (k.startswith("_") and k[1:].replace("_", "").isupper()):
            continue
        if isinstance(v, dict):
            v.clear()
        elif v is not None and not isinstance(v, (str, int, float)):
            setattr(groups, k, None)


def decoder_layers(model):
    """The decoder blocks in order (a ModuleList named `layers`)."""
    import torch
    best = None
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and name.endswith("layers"):
            best = m
            break
    return list(best) if best is not None else []


def hook_layers(layers, tr):
    """Boundary samples of each block: the live bytes after its forward, the
    peak while its backward runs (from its output's gradient to its input's),
    and the live bytes when its input's gradient is ready (its backward done).
    The hooks also tell the tracker where it is, for what is created there."""
    handles = []
    for i, layer in enumerate(layers):
        def grad_out(g, i=i):
            # Block i's output is block i+1's input: one gradient ends i+1's
            # backward and starts i's, whichever of the two hooks runs first.
            tr.close_window(i + 1)
            tr.open_window(i, f"backward layer {i}")

        def grad_in(g, i=i):
            tr.boundary("backward", i)
            tr.close_window(i)
            tr.where = f"backward below layer {i}"

        def post(mod, args, kwargs, out, i=i, grad_out=grad_out):
            if tr.phase != "forward":
                return
            tr.boundary("forward", i)
            tr.where = "forward"
            h = out[0] if isinstance(out, (tuple, list)) else out
            if getattr(h, "requires_grad", False):
                h.register_hook(grad_out)

        def pre(mod, args, kwargs, i=i, grad_in=grad_in):
            if tr.phase != "forward":
                return
            tr.where = f"forward layer {i}"
            h = args[0] if args else kwargs.get("hidden_states")
            if h is not None and h.requires_grad:
                h.register_hook(grad_in)

        handles.append(layer.register_forward_hook(post, with_kwargs=True))
        handles.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
    return handles


def tensors_of(obj, depth=0):
    """Tensors reachable from obj through lists, tuples, dicts and (at depth 0)
    plain attributes: how the framework's own buffers get names."""
    import torch
    if isinstance(obj, torch.Tensor):
        yield "", obj
        return
    if depth > 2:
        return
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif depth == 0 and hasattr(obj, "__dict__"):
        items = vars(obj).items()
    else:
        return
    for k, v in items:
        for sub, t in tensors_of(v, depth + 1):
            yield f".{k}{sub}" if not isinstance(k, int) else f"[{k}]{sub}", t


def storage_names(job):
    """StorageImpl address -> (name, kind) for what the job holds now."""
    import torch
    names = {}

    def add(t, name, kind):
        try:
            from torch.distributed.tensor import DTensor
            if isinstance(t, DTensor):
                t = t._local_tensor
            key = t.untyped_storage()._cdata
        except (RuntimeError, NotImplementedError, AttributeError):
            return
        names.setdefault(key, (name, kind))

    model = job.named.get("model")
    if model is not None:
        for n, p in model.named_parameters():
            add(p, n, "param")
            if getattr(p, "ds_tensor", None) is not None:
                add(p.ds_tensor, n + ".ds_tensor", "param shard")
            if p.grad is not None:
                add(p.grad, n + ".grad", "grad")
        for n, b in model.named_buffers():
            add(b, n, "buffer")
    for label, obj in job.named.items():
        if label == "model":
            continue
        if isinstance(obj, torch.optim.Optimizer):
            for i, st in enumerate(obj.state.values()):
                for k, v in st.items():
                    if isinstance(v, torch.Tensor):
                        add(v, f"optimizer.state[{i}].{k}", "optimizer state")
            continue
        inner = getattr(obj, "optimizer", None)
        if isinstance(inner, torch.optim.Optimizer):
            for i, st in enumerate(inner.state.values()):
                for k, v in st.items():
                    if isinstance(v, torch.Tensor):
                        add(v, f"{label}.optimizer.state[{i}].{k}", "optimizer state")
        for sub, t in tensors_of(obj):
            add(t, label + sub, "framework buffer")
    return names


def at_peak(tr, names):
    """The live set at the peak, grouped: named storages by name, the rest by
    (phase, place, op) of their creation; largest first."""
    groups = {}
    kinds = {}
    for key, (nbytes, phase, where, op, birth) in tr.peak_live().items():
        now = tr.live.get(key)
        if key in names and now is not None and now[4] == birth:  # the same storage, still alive
            name, kind = names[key]
            if kind in ("param", "grad", "param shard") and "." in name:
                name = generic_name(name)
        else:
            kind = f"made in {phase}"
            name = f"{op} ({where})"
        g = groups.setdefault((name, kind), [0, 0])
        g[0] += nbytes
        g[1] += 1
        kinds[kind] = kinds.get(kind, 0) + nbytes
    top = sorted(groups.items(), key=lambda kv: -kv[1][0])[:TOP_AT_PEAK]
    return [[n, k, b, c] for (n, k), (b, c) in top], kinds


def generic_name(name):
    """model.layers.3.self_attn.q_proj.weight -> model.layers.*.self_attn.q_proj.weight"""
    parts = name.split(".")
    return ".".join("*" if p.isdigit() else p for p in parts)


def single_thread():
    """One thread per process: the tensors are tiny, and OpenMP's spinning
    threads cost more CPU than they save on a shared machine."""
    import torch
    torch.set_num_threads(1)


def trace_one(c, rank):
    """Sets up configuration c as rank `rank` under the tracker and runs STEPS
    steps; returns the rank's record entry."""
    import torch
    import cpu_truth_setups as setups
    check_torch_linear(c)
    restore_torch_linear(c)
    init_rank(rank, c["world"])
    torch.manual_seed(1234)
    Tracker = cpu_trace.make_tracker()
    tr = Tracker()
    t0 = time.perf_counter()
    vocab = c["shape"]["vocab_size"]
    with tr:
        job = setups.SETUPS[c["framework"]](c)
        handles = hook_layers(decoder_layers(job.model), tr)
        x = torch.randint(0, vocab, (c["batch"], c["seq"]))
        for s in range(STEPS):
            if s == STEPS - 1:
                tr.boundaries, tr.window_peaks = [], {}
            tr.set_phase("forward")
            loss = job.forward(x)
            tr.set_phase("backward")
            job.backward(loss)
            del loss
            tr.set_phase("optimizer")
            job.step()
            tr.set_phase("idle")
        names = storage_names(job)
        top, kinds = at_peak(tr, names)
        for h in handles:
            h.remove()
    elapsed = time.perf_counter() - t0
    layers = len(decoder_layers(job.model))
    fwd, bwd, bwd_peak = [None] * layers, [None] * layers, [None] * layers
    for phase, layer, nbytes in tr.boundaries:
        (fwd if phase == "forward" else bwd)[layer] = nbytes
    for layer, nbytes in tr.window_peaks.items():
        bwd_peak[layer] = nbytes
    entry = {"rank": rank, "peak_allocated_bytes": tr.peak,
             "peak_phase": tr.peak_phase,
             "trace": {"peak_where": tr.peak_where,
                       "phase_peak_bytes": {k: v for k, v in tr.phase_peak.items()
                                            if k in ("init", "forward", "backward", "optimizer")},
                       "forward_layer_bytes": fwd, "backward_layer_bytes": bwd,
                       "backward_layer_peak_bytes": bwd_peak,
                       "at_peak": top, "at_peak_bytes_by_kind": kinds,
                       "attention_ops": sorted(tr.ops_seen), "storage_events": tr.events,
                       "trace_s": round(elapsed, 2)}}
    settings = dict(job.settings)
    del job, tr
    return entry, settings


def record_for(c, entry, settings, stack):
    cfg = matrix.record_config(c)
    cfg["settings"] = dict(c["settings"])
    cfg["settings"]["attention_ops"] = entry["trace"]["attention_ops"]
    if "deepspeed_config" in settings:
        cfg["deepspeed"] = settings["deepspeed_config"]
    run = {"source": f"cpu_truth.py {RUNNER_VERSION} (git {git_commit()})",
           "date": datetime.date.today().isoformat(),
           "framework": FRAMEWORK_OF[c["framework"]], "method": pr.METHOD_CPU_TRACE,
           "world_size": c["world"], "emulated_rank": entry["rank"],
           "hardware": {"gpu": "h100-80gb", "gpus_per_node": c["world"], "nodes": 1},
           "config": cfg, "stack": stack, "ranks": [entry],
           "notes": c["name"]}
    return pr.make_record(run)


def git_commit():
    try:
        r = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="append the records to this file")
    p.add_argument("--shard", default="0/1", help="I/K: every K-th point from the I-th")
    p.add_argument("--only", default="", help="points whose name holds this text")
    p.add_argument("--list", action="store_true", help="list the points and exit")
    p.add_argument("--merge", nargs="+", metavar="SHARD",
                   help="write the records of these shard files to --out in matrix order")
    p.add_argument("--point", help="trace only the point of this exact name (with --rank), "
                   "alone in this process; its record replaces --out (or goes to stdout)")
    p.add_argument("--rank", type=int, default=0, help="the rank of --point")
    a = p.parse_args(argv)
    i, k = (int(v) for v in a.shard.split("/"))
    if not 0 <= i < k:
        p.error("--shard I/K needs 0 <= I < K")
    if a.merge and not a.out:
        p.error("--merge needs --out")
    a.shard_i, a.shard_k = i, k
    return a


def merge(shards, out):
    """The shards' records in matrix order (point, then rank) into out,
    replaced whole (written beside it, then renamed)."""
    order = {(c["name"], r): n for n, (c, r) in
             enumerate((c, r) for c in matrix.points() for r in c["ranks"])}
    lines = []
    for path in shards:
        with open(path, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                key = (rec["notes"], rec["measured"]["ranks"][0]["rank"])
                lines.append((order.get(key, len(order)), line))
    lines.sort(key=lambda kv: kv[0])
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(line for _, line in lines)
    os.replace(tmp, out)
    print(f"cpu_truth: {len(lines)} records in {out}", file=sys.stderr)
    return 0


def spawn(argv):
    """Runs this script in a new process with argv; (exit status, its stderr).
    Its stdout (DeepSpeed prints there) is dropped."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__)] + argv, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return proc.returncode, proc.stderr


def run_fresh(c, r):
    """Traces (c, r) in a new process of this script (--point, --rank, --out
    a file of its own); its record line and rank entry, or an exception with
    the new process's last words."""
    import tempfile
    fd, path = tempfile.mkstemp(prefix="cpu_truth_point.", suffix=".jsonl")
    os.close(fd)
    try:
        rc, err = spawn(["--point", c["name"], "--rank", str(r), "--out", path])
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    finally:
        os.unlink(path)
    if rc != 0 or len(lines) != 1:
        tail = err.strip().splitlines()[-1:] or ["no record"]
        raise RuntimeError(f"fresh process exited {rc} with {len(lines)} records: {tail[0]}")
    return lines[0] + "\n", json.loads(lines[0])["measured"]["ranks"][0]


def trace_point(kind, c, r, stack):
    """The record line of (c, r) and its rank entry, traced here or fresh."""
    if kind == "fresh":
        return run_fresh(c, r)
    entry, settings = trace_one(c, r)
    return pr.record_line(record_for(c, entry, settings, stack)), entry


def child(a):
    """--point NAME --rank R [--out FILE]: that point alone in this process,
    its record written to FILE (replaced) or to stdout."""
    match = [c for c in matrix.points() if c["name"] == a.point and a.rank in c["ranks"]]
    if len(match) != 1:
        print(f"cpu_truth: no matrix point {a.point!r} with rank {a.rank}", file=sys.stderr)
        return 2
    single_thread()
    line, _ = trace_point("here", match[0], a.rank, versions())
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(line)
    else:
        sys.stdout.write(line)
    return 0


def main(argv):
    a = parse_args(argv)
    if a.merge:
        return merge(a.merge, a.out)
    if a.point:
        return child(a)
    points = [(c, r) for c in matrix.points() for r in c["ranks"] if a.only in c["name"]]
    points = points[a.shard_i::a.shard_k]
    if a.list:
        for kind, c, r in schedule(points):
            print(f"{c['name']} rank {r}" + (" (fresh process)" if kind == "fresh" else ""))
        print(f"{len(points)} configuration-rank points", file=sys.stderr)
        return 0
    stack = versions()
    single_thread()
    failures = 0
    t_all = time.perf_counter()
    for n, (kind, c, r) in enumerate(schedule(points)):
        try:
            line, entry = trace_point(kind, c, r, stack)
        except Exception as e:  # one point's failure is reported, the rest still run
            failures += 1
            print(f"cpu_truth: {c['name']} rank {r}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        if n % 16 == 15:
            gc.collect()  # the frameworks' reference cycles, now and then
        if a.out:
            pr.append_line(a.out, line)
        else:
            sys.stdout.write(line)
        print(f"cpu_truth: [{n + 1}/{len(points)}] {c['name']} rank {r}: peak "
              f"{entry['peak_allocated_bytes']} B at {entry['peak_phase']} "
              f"({entry['trace']['trace_s']} s{', fresh process' if kind == 'fresh' else ''})",
              file=sys.stderr)
    print(f"cpu_truth: {len(points) - failures} records, {failures} failed, "
          f"{time.perf_counter() - t_all:.0f} s", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
