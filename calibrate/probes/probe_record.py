"""The probe's record writer: what one probe run measured, as one
`ftest.record/1` line (docs/records.md).

Pure functions of plain dicts, with no import of torch, so that the suite
tests them on fixtures on machines without PyTorch (calibrate/probes/
test_probe_record.py, run by `make test`). ftest_probe.py gathers the figures;
this module decides what a record may say:

  * every record names its method (measured on real GPUs, rank-emulated on one
    GPU with the fake process group, or traced without a GPU) and the full
    software stack that produced it;
  * a rank-emulated or traced record carries no step time: with the fake
    backend every collective returns at once, so the time of rank r of N is
    not the time of an N-GPU step (shared/DESIGN.md, "Hardware");
  * missing numbers are left out, never written as 0; sizes are whole bytes;
    NaN and infinities are refused (json.dumps(allow_nan=False)).
"""

import json
import math

SCHEMA = "ftest.record/1"

# The methods a record may name (DESIGN.md, "Measurement records"), as the
# words that open `method` in every record the probe writes.
METHOD_MEASURED = "measured"
METHOD_EMULATED = "rank-emulated"
METHOD_TRACED = "traced"
METHOD_CPU_TRACE = "cpu-trace"  # cpu_truth.py: every storage of a real step on the CPU
METHODS = (METHOD_MEASURED, METHOD_EMULATED, METHOD_TRACED, METHOD_CPU_TRACE)
TRACE_METHODS = (METHOD_TRACED, METHOD_CPU_TRACE)

FRAMEWORKS = ("hf", "deepspeed", "fsdp")

# Per-rank allocator figures the probe may report, all in bytes.
RANK_BYTES = (
    "peak_allocated_bytes",   # torch.cuda.max_memory_allocated
    "peak_active_bytes",      # memory_stats()["active_bytes.all.peak"]
    "peak_reserved_bytes",    # torch.cuda.max_memory_reserved
    "device_used_bytes",      # cudaMemGetInfo: total - free at the peak sample
    "device_total_bytes",     # cudaMemGetInfo: total
    "device_free_at_start_bytes",   # cudaMemGetInfo: free before the model was built
    "device_total_at_start_bytes",  # cudaMemGetInfo: total, same call
)

# The stack keys a record must name: the versions every framework profile
# depends on. A probe that did not import a package writes null for it, so a
# reader can tell "absent" from "forgotten".
STACK_KEYS = ("python", "torch", "cuda", "transformers", "accelerate", "deepspeed",
              "peft", "bitsandbytes")


# Per-step detail (docs/records.md, "Per step"; probe_steps.py gathers it).
MEMORY_STEP_KEYS = ("allocated_bytes", "active_bytes", "reserved_bytes", "peak_allocated_bytes",
                    "peak_active_bytes", "peak_reserved_bytes", "num_alloc_retries",
                    "num_device_alloc", "num_device_free")
MAX_STEPS = 100000  # more per-step entries than any probe run takes: a wrong list


class RecordError(ValueError):
    """A record the writer refuses to emit, with the reason."""


def _whole_bytes(name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(f"{name} must be a whole number of bytes, got {value!r}")
    if value < 0:
        raise RecordError(f"{name} must not be negative, got {value}")
    return value


def _positive_number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise RecordError(f"{name} must be positive and finite, got {value!r}")
    return float(value)


def _flags(name, value):
    if not isinstance(value, list) or len(value) > MAX_STEPS \
            or not all(isinstance(v, bool) for v in value):
        raise RecordError(f"{name} must be a list of true/false, one per step, got {value!r}"[:200])
    return list(value)


def _memory_by_step(rank, value):
    """A rank's memory_by_step: entries {"step": n >= 1, MEMORY_STEP_KEYS...},
    steps increasing, every figure a whole non-negative number."""
    if not isinstance(value, list) or not value or len(value) > MAX_STEPS:
        raise RecordError(f"rank {rank} memory_by_step must be a non-empty list")
    out, last = [], 0
    for e in value:
        if not isinstance(e, dict):
            raise RecordError(f"rank {rank} memory_by_step holds {e!r}, not an object")
        step = e.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step <= last:
            raise RecordError(f"rank {rank} memory_by_step: step {step!r} is not a step after "
                              f"{last}")
        unknown = [k for k in e if k != "step" and k not in MEMORY_STEP_KEYS]
        if unknown:
            raise RecordError(f"rank {rank} memory_by_step: unknown {', '.join(unknown)}")
        entry = {"step": step}
        for k in MEMORY_STEP_KEYS:
            if e.get(k) is not None:
                entry[k] = _whole_bytes(f"rank {rank} step {step} {k}", e[k])
        out.append(entry)
        last = step
    return out


def _step_times(run, method, measured):
    """step_times_s (every timed step, warm-up included) and warmup_steps (how
    many of the first were left out of step_time_s, the median of the rest)."""
    times = run.get("step_times_s")
    if times is None:
        if run.get("warmup_steps") is not None:
            raise RecordError("warmup_steps needs step_times_s")
        return
    if method != METHOD_MEASURED:
        raise RecordError(f"a {method} record carries no step time: with the fake backend "
                          "collectives return at once")
    if not isinstance(times, list) or not times or len(times) > MAX_STEPS:
        raise RecordError("step_times_s must be a non-empty list of seconds")
    times = [_positive_number("step_times_s[]", t) for t in times]
    warmup = run.get("warmup_steps", 0)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup < len(times):
        raise RecordError(f"warmup_steps must be in [0, {len(times)}), got {warmup!r}")
    step = measured.get("step_time_s")
    if step is not None:
        steady = sorted(times[warmup:])
        n = len(steady)
        median = steady[n // 2] if n % 2 else (steady[n // 2 - 1] + steady[n // 2]) / 2
        if abs(median - step) > 1e-9 * step:
            raise RecordError(f"step_time_s {step} is not the median of step_times_s after "
                              f"{warmup} warm-up steps ({median})")
    measured["step_times_s"] = times
    measured["warmup_steps"] = warmup


def _per_step(run, method, oom, measured):
    """The per-step keys of `measured` (docs/records.md, "Per step")."""
    if not oom:
        _step_times(run, method, measured)
    for key in ("step_overflow", "step_padded"):
        if run.get(key) is not None:
            measured[key] = _flags(key, run[key])


def method_text(method, world_size, emulated_rank=None):
    """The `method` sentence of a record."""
    if method == METHOD_MEASURED:
        if world_size == 1:
            return "measured on 1 real GPU"
        return f"measured on {world_size} real GPUs, one process per GPU"
    if method == METHOD_EMULATED:
        return (f"rank-emulated: rank {emulated_rank} of {world_size} on one GPU with "
                "torch.distributed's fake backend (collectives return at once; no NCCL "
                "buffers, no multi-GPU step time)")
    if method == METHOD_TRACED:
        return (f"traced without a GPU: rank {emulated_rank} of {world_size} under "
                "FakeTensorMode with torch's memory tracker (no allocator, no CUDA "
                "context, no workspaces, no step time)")
    if method == METHOD_CPU_TRACE:
        return (f"traced without a GPU (cpu-trace): rank {emulated_rank} of {world_size} in one "
                "CPU process with torch.distributed's fake backend, every storage counted at "
                "512-byte rounding (no caching allocator, no CUDA context, no workspaces, no "
                "CUDA-only kernels, no step time)")
    raise RecordError(f"unknown method {method!r} (one of {', '.join(METHODS)})")


def make_record(run):
    """Builds the record dict from one probe run's description.

    `run` holds: source, date, framework, method, world_size, hardware (gpu,
    gpus_per_node, nodes), config (the run description with ftest's names),
    stack (versions, keys STACK_KEYS), ranks (list of dicts with a "rank" and
    any of RANK_BYTES), and optionally oom, step_time_s, tokens_per_step,
    emulated_rank, notes, tolerance, point (the make gpu-day plan point
    that produced it, kept as "point" so a resumed day can tell a record
    it already has), the per-step detail (docs/records.md, "Per step"):
    step_times_s with warmup_steps, step_overflow, step_padded, and each
    rank's memory_by_step; and repeat_of (the point this run repeats at the
    end of its process, --repeat-short). Raises RecordError on anything a
    record must not say."""
    for key in ("source", "date", "framework", "method", "world_size", "hardware",
                "config", "stack"):
        if key not in run:
            raise RecordError(f"the run lacks {key!r}")
    framework = run["framework"]
    if framework not in FRAMEWORKS:
        raise RecordError(f"framework {framework!r} is not one of {', '.join(FRAMEWORKS)}")
    method = run["method"]
    if method not in METHODS:
        raise RecordError(f"unknown method {method!r} (one of {', '.join(METHODS)})")
    world = run["world_size"]
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise RecordError(f"world_size must be a positive whole number, got {world!r}")
    emulated_rank = run.get("emulated_rank")
    if method in (METHOD_EMULATED,) + TRACE_METHODS:
        if not isinstance(emulated_rank, int) or not 0 <= emulated_rank < world:
            raise RecordError(f"{method} needs emulated_rank in [0, {world})")

    stack = run["stack"]
    missing = [k for k in STACK_KEYS if k not in stack]
    if missing:
        raise RecordError("the stack lacks " + ", ".join(missing))

    hw = run["hardware"]
    for key in ("gpu", "gpus_per_node", "nodes"):
        if key not in hw:
            raise RecordError(f"hardware lacks {key!r}")
    if hw["gpus_per_node"] * hw["nodes"] != world:
        raise RecordError(f"hardware has {hw['gpus_per_node']} x {hw['nodes']} ranks, "
                          f"world_size is {world}")

    oom = bool(run.get("oom", False))
    measured = {"oom": oom}
    ranks = run.get("ranks") or []
    if not oom and not ranks:
        raise RecordError("a run that did not run out of memory must report its ranks")
    out_ranks = []
    for r in ranks:
        rank = r.get("rank")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
            raise RecordError(f"rank {rank!r} is outside [0, {world})")
        entry = {"rank": rank}
        for key in RANK_BYTES:
            if r.get(key) is not None:
                entry[key] = _whole_bytes(f"rank {rank} {key}", r[key])
        kinds = r.get("traced_peak_bytes_by_kind")
        if kinds is not None:
            if method not in TRACE_METHODS:
                raise RecordError("traced_peak_bytes_by_kind belongs to traced records")
            entry["traced_peak_bytes_by_kind"] = {
                str(k): _whole_bytes(f"rank {rank} traced {k}", v) for k, v in kinds.items()}
        if r.get("peak_phase") is not None:
            entry["peak_phase"] = str(r["peak_phase"])[:47]
        if r.get("trace") is not None:  # cpu-trace detail (docs/records.md)
            if method != METHOD_CPU_TRACE:
                raise RecordError("trace belongs to cpu-trace records")
            entry["trace"] = r["trace"]
        if r.get("memory_by_step") is not None:
            entry["memory_by_step"] = _memory_by_step(rank, r["memory_by_step"])
        if "peak_allocated_bytes" not in entry and "peak_active_bytes" not in entry:
            raise RecordError(f"rank {rank} has neither peak_allocated_bytes nor "
                              "peak_active_bytes")
        out_ranks.append(entry)
    if out_ranks:
        measured["ranks"] = out_ranks

    step = run.get("step_time_s")
    if step is not None and not oom:
        if method != METHOD_MEASURED:
            raise RecordError(f"a {method} record carries no step time: with the fake backend "
                              "collectives return at once")
        step = _positive_number("step_time_s", step)
        measured["step_time_s"] = step
        measured["it_per_s"] = 1.0 / step
        tokens = run.get("tokens_per_step")
        if tokens is not None:
            measured["tokens_per_s"] = _positive_number("tokens_per_step", tokens) / step
    _per_step(run, method, oom, measured)

    record = {
        "schema": SCHEMA,
        "source": run["source"],
        "date": run["date"],
        "framework": framework,
        "method": method_text(method, world, emulated_rank),
        "stack": {**{k: stack[k] for k in STACK_KEYS},
                  **{k: v for k, v in stack.items() if k not in STACK_KEYS}},
        "hardware": {"gpu": hw["gpu"], "gpus_per_node": hw["gpus_per_node"],
                     "nodes": hw["nodes"],
                     # torch's fake backend opens no NCCL communicator (docs/records.md)
                     **({"process_group": "fake"} if method == METHOD_EMULATED else {})},
        "config": dict(run["config"]),
        "measured": measured,
    }
    if run.get("tolerance"):
        record["tolerance"] = dict(run["tolerance"])
    if run.get("notes"):
        record["notes"] = run["notes"]
    if run.get("point"):
        record["point"] = str(run["point"])
    if run.get("repeat_of"):
        if run.get("point"):
            raise RecordError("a repeat names the point it repeats (repeat_of), not a point")
        record["repeat_of"] = str(run["repeat_of"])
    return record


def record_line(record):
    """The record as one line of JSON with its newline; refuses NaN."""
    try:
        text = json.dumps(record, separators=(",", ":"), allow_nan=False)
    except ValueError as e:
        raise RecordError(f"the record holds a number JSON cannot carry: {e}") from None
    return text + "\n"


def append_line(path, line):
    """Appends one whole line under an exclusive flock with one write(), then
    fsyncs: the contract of ftest calibrate's writer (calibrate/
    calibrate_append.c), so a killed probe leaves no half line."""
    import fcntl
    import os
    data = line.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.write(fd, data) != len(data):
            raise OSError(f"short write to {path}")
        os.fsync(fd)
    finally:
        os.close(fd)
