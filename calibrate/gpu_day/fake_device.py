#!/usr/bin/env python3
"""The fake device of `make gpu-day DRY_RUN=1`: stands in for the probe, ftrain,
gpu_parity and the PyTorch benchmark with the same command lines and outputs,
so that the driver's planning, resumption, limits and record validation run on
a machine without a GPU (calibrate/gpu_day/test_gpu_day.py, CI).

  fake_device.py probe ARGS        ftest_probe.py's --versions and --jobs interface: per job a
                                   start event, a wait of its estimate (the driver writes
                                   "est_s" into each job) times a fixed per-point factor in
                                   [0.6, 1.6], a plausible record through the probe's own
                                   writer (probe_record.py), an end event
  fake_device.py ftrain ARGS       the real CPU ftrain (GPU_DAY_REAL_FTRAIN) on tiny-llama at a
                                   few tokens, with the run's other flags, then a wait
  fake_device.py gpu_parity        the lines of a passing build/gpu_parity
  fake_device.py torch_bench ARGS  a plausible tokens/s after a wait

Waits are device seconds times GPU_DAY_TIME_SCALE. Faults, by point id:
GPU_DAY_FAKE_CRASH (the process dies in that point, its first time only),
GPU_DAY_FAKE_ERROR (the points, comma-separated, raise every time),
GPU_DAY_FAKE_LEAK (a probe process stops before every point but its first
whose id contains this text, exit 4, as the probe does when it finds memory
still allocated), GPU_DAY_FAKE_HANG (the
point never ends), GPU_DAY_FAKE_OOM (an out-of-memory record),
GPU_DAY_FAKE_SLOW (the point takes a real second more: a test kills the
driver inside it).

Every record it writes says "dry run" in its source: none is a measurement."""

import hashlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "probes"))

import memory_history as mh  # noqa: E402
import plan as pl  # noqa: E402
import probe_record as pr  # noqa: E402

SCALE = float(os.environ.get("GPU_DAY_TIME_SCALE", "0.01"))
STACK = {"python": "3.12.3", "torch": "2.11.0+fake", "cuda": "13.0", "transformers": "5.17.0",
         "accelerate": "1.15.0", "deepspeed": "0.19.8", "peft": "0.21.2", "bitsandbytes": "0.50.2",
         "liger_kernel": "0.8.5", "gpu_name": "NVIDIA H100 80GB HBM3 (fake)", "driver": "fake"}


def wait(device_s):
    time.sleep(max(0.0, device_s) * SCALE)


def factor(ident):
    """A fixed factor in [0.6, 1.6] per point: estimates are off both ways."""
    return 0.6 + int(hashlib.sha1(ident.encode()).hexdigest()[:4], 16) / 65535.0


def opt(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def event(path, **fields):
    pr.append_line(path, json.dumps({**fields, "t": time.time(), "pid": os.getpid()}) + "\n")


def fake_record(job, proc):
    """A record with plausible peaks: 16 bytes per parameter (sharded by the
    world under ZeRO-3/FSDP full shard) and 40 bytes per token and hidden unit
    per block for the activations. Plausible, not modelled."""
    a = job["args"]
    model, layers = opt(a, "--model", "tiny-llama"), int(opt(a, "--layers", "0"))
    seq, batch, world = int(opt(a, "--seq", "512")), int(opt(a, "--batch", "1")), int(proc["--world"])
    c = pl.load_model(model)
    n = pl.param_count(model, layers)
    shard = world if opt(a, "--zero", "0") == "3" else 1
    act = 40 * seq * batch * c["hidden_size"] * (layers or c["num_hidden_layers"])
    peak = int(16 * n / shard + act)
    mode = opt(a, "--mode")
    oom = os.environ.get("GPU_DAY_FAKE_OOM") == job["id"]
    run = {"source": "fake_device.py (DRY RUN: not a measurement)", "date": "2026-01-01",
           "framework": {"deepspeed": "deepspeed", "fsdp": "fsdp", "fsdp2": "fsdp"}.get(mode, "hf"),
           "method": "measured" if world == 1 else "rank-emulated", "world_size": world,
           "emulated_rank": int(proc["--rank"]),
           "hardware": {"gpu": proc["--gpu"], "gpus_per_node": world, "nodes": 1},
           "config": {"model": model, "micro_batch": batch, "grad_accum": 1, "seq_len": seq,
                      "precision": opt(a, "--precision", "bf16-mixed"), "zero": int(opt(a, "--zero", "0")),
                      "offload": opt(a, "--offload", "none"), "checkpointing": opt(a, "--checkpointing", "none"),
                      "attention": opt(a, "--attention", "sdpa"), "loss": "standard", "optimizer": "adamw",
                      "probe_mode": mode, **({"layers": layers} if layers else {}),
                      # as ftest_probe.py reads it: the driver sets it per group
                      "expandable_segments":
                          "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")},
           "stack": STACK, "oom": oom, "point": job["id"],
           "ranks": [] if oom else [{"rank": int(proc["--rank"]), "peak_allocated_bytes": peak,
                                     "peak_reserved_bytes": int(peak * 1.08),
                                     # an 80 GB card less a CUDA context of 520 MiB
                                     "device_free_at_start_bytes": 85_017_624_576 - (520 << 20),
                                     "device_total_at_start_bytes": 85_017_624_576}],
           "step_time_s": 0.05 + 6 * n * seq * batch / 3e14 if world == 1 else None,
           "tokens_per_step": seq * batch * world}
    add_steps(run, mode, int(opt(a, "--steps", "8")), int(opt(a, "--warmup", "3")))
    return pr.record_line(pr.make_record(run))


def add_steps(run, mode, steps, warmup):
    """The per-step keys as ftest_probe.py writes them (docs/records.md, "Per
    step"): every step's time (the warm-up slower, the rest the median), padding
    (none), DeepSpeed's skipped steps (the first), the allocator after steps 1,
    2 and the last. Plausible, not modelled."""
    if run["oom"]:
        return
    t = run["step_time_s"]
    if t is not None:
        run["step_times_s"] = [t * (1 + warmup - i) if i < warmup else t for i in range(steps)]
        run["warmup_steps"] = warmup
    run["step_padded"] = [False] * steps
    if mode == "deepspeed":
        run["step_overflow"] = [i == 0 for i in range(steps)]
    r = run["ranks"][0]
    run["ranks"][0]["memory_by_step"] = [
        {"step": s, "allocated_bytes": r["peak_allocated_bytes"] // 2,
         "reserved_bytes": r["peak_reserved_bytes"], "peak_allocated_bytes": r["peak_allocated_bytes"],
         "peak_reserved_bytes": r["peak_reserved_bytes"], "num_alloc_retries": 0,
         "num_device_alloc": 10 + s} for s in sorted({1, 2, steps})]


def fake_snapshot(peak):
    """torch.cuda.memory._snapshot()'s shape for a run whose allocated peak is
    `peak`: one segment holding the weights and state (half), one reserved for
    a temporary freed before the end (the rest, 2 MiB-aligned)."""
    half, mib2 = peak // 2, 2 << 20
    rest = -(-(peak - half) // mib2) * mib2
    a1, a2 = 1 << 40, (1 << 40) + (1 << 36)
    frames = [{"filename": "/probe/modeling_llama.py", "line": 1, "name": "forward"}]
    trace = [{"action": "segment_alloc", "addr": a1, "size": half, "stream": 0, "frames": []},
             {"action": "alloc", "addr": a1, "size": half, "stream": 0, "frames": frames},
             {"action": "segment_alloc", "addr": a2, "size": rest, "stream": 0, "frames": []},
             {"action": "alloc", "addr": a2, "size": peak - half, "stream": 0, "frames": frames},
             {"action": "free_requested", "addr": a2, "size": peak - half, "stream": 0, "frames": frames},
             {"action": "free_completed", "addr": a2, "size": peak - half, "stream": 0, "frames": frames}]
    segs = [{"device": 0, "address": a1, "total_size": half, "stream": 0, "segment_type": "large",
             "blocks": [{"size": half, "requested_size": half, "state": "active_allocated", "frames": frames}]},
            {"device": 0, "address": a2, "total_size": rest, "stream": 0, "segment_type": "large",
             "blocks": [{"size": rest, "requested_size": 0, "state": "inactive", "frames": []}]}]
    return {"segments": segs, "device_traces": [trace]}


def fake_memory_history(job, proc, line):
    """ftest_probe.write_memory_history's line for a --memory-history job."""
    a = job["args"]
    if "--memory-history" not in a or '"oom":true' in line:
        return
    rank = json.loads(line)["measured"]["ranks"][0]
    s = mh.summarise(fake_snapshot(rank["peak_allocated_bytes"]), 0, rank["peak_reserved_bytes"])
    s.update({"oom": False, "max_entries": int(opt(a, "--memory-history")), "probe_mode": opt(a, "--mode"),
              "world_size": int(proc["--world"]), "rank": int(proc["--rank"]), "model": opt(a, "--model"),
              "seq": int(opt(a, "--seq", "512")), "dry_run": True})
    path = os.path.join(os.path.dirname(os.path.abspath(proc["--record"])), "memory-history.jsonl")
    pr.append_line(path, mh.bounded_line(path, job["id"], s))


def crash_once(ident):
    marker = os.path.join(os.environ.get("GPU_DAY_FAKE_DIR", "/tmp"), "crashed-" + hashlib.sha1(
        ident.encode()).hexdigest()[:12])
    if os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


def fake_job(job, proc):
    ident, est = job["id"], float(job.get("est_s", 3.0))
    event(proc["--events"], point=ident, event="start")
    if os.environ.get("GPU_DAY_FAKE_HANG") == ident:
        while True:
            time.sleep(1)
    if os.environ.get("GPU_DAY_FAKE_CRASH") == ident and crash_once(ident):
        wait(est / 2)
        os._exit(137)
    wait(est * factor(ident))
    if os.environ.get("GPU_DAY_FAKE_SLOW") == ident:
        time.sleep(1.0)
    if ident in os.environ.get("GPU_DAY_FAKE_ERROR", "").split(","):
        event(proc["--events"], point=ident, event="end", outcome="error", elapsed_s=0,
              message="RuntimeError: an error the fake device was told to raise")
        return 3
    line = fake_record(job, proc)
    pr.append_line(proc["--record"], line)
    fake_memory_history(job, proc, line)
    event(proc["--events"], point=ident, event="end", outcome="oom" if '"oom":true' in line else "ok",
          elapsed_s=0, message="")
    return 0


def probe(args):
    if "--versions" in args:
        print("ftest_probe (fake): " + json.dumps(STACK), file=sys.stderr)
        print(json.dumps(STACK, indent=1))
        return 0
    proc = {k: opt(args, k) for k in ("--jobs", "--events", "--record", "--world", "--rank", "--gpu")}
    family = "deepspeed" if "ds-" in proc["--jobs"] else "fsdp" if "fsdp" in proc["--jobs"] else "hf"
    wait(pl.PROCESS_START_S[family])
    with open(proc["--jobs"], encoding="utf-8") as f:
        jobs = [json.loads(x) for x in f if x.strip()]
    leak = os.environ.get("GPU_DAY_FAKE_LEAK")
    for n, job in enumerate(jobs):
        if leak and n > 0 and leak in job["id"]:  # as ftest_probe.run_job: a fresh process is needed
            print(f"ftest_probe: {1 << 32} bytes allocated before {job['id']}: a fresh process is needed",
                  file=sys.stderr)
            return 4
        rc = fake_job(job, proc)
        if rc:
            return rc
    return fake_repeats(jobs, proc, int(opt(args, "--repeat-short", "0")))


def fake_repeats(jobs, proc, tokens):
    """As ftest_probe.run_job_list with --repeat-short: the timed points of at
    most `tokens` tokens a micro-batch again, each a record with repeat_of
    instead of point, and events named POINT#repeat."""
    for job in jobs if tokens else []:
        a = job["args"]
        if proc["--world"] != "1" or "--memory-history" in a \
                or int(opt(a, "--seq", "512")) * int(opt(a, "--batch", "1")) > tokens:
            continue
        rep = dict(job, id=job["id"] + "#repeat")
        event(proc["--events"], point=rep["id"], event="start")
        rec = json.loads(fake_record(job, proc))
        if rec["measured"]["oom"]:
            continue
        del rec["point"]
        rec["repeat_of"] = job["id"]
        pr.append_line(proc["--record"], pr.record_line(rec))
        event(proc["--events"], point=rep["id"], event="end", outcome="ok", elapsed_s=0, message="")
    return 0


def ftrain(args):
    """The real CPU ftrain on a tiny model, keeping the run's other flags."""
    keep = {"--precision", "--attention", "--checkpointing", "--offload", "--loss", "--grad-accum", "--zero",
            "--lr", "--warmup", "--record", "--dump-grads", "--quiet", "--help"}
    out, i, steps = [os.environ["GPU_DAY_REAL_FTRAIN"], "--device", "cpu", "--model", "tiny-llama",
                     "--seq", "16", "--batch", "2"], 0, int(opt(args, "--steps", "3"))
    while i < len(args):
        flag = args[i]
        takes = flag not in ("--quiet", "--help")
        if flag in keep:
            out += [flag] + ([args[i + 1]] if takes else [])
        i += 2 if takes else 1
    out += ["--steps", str(min(steps, 60))]
    rc = subprocess.run(out).returncode
    wait(pl.FTRAIN_START_S + 0.2 * steps)
    return rc


def gpu_parity(_args):
    wait(20)
    print("test-gpu: fp32 21 ops, 41234 values, worst 0.120 of tolerance (fake device)")
    print("test-gpu: bf16 21 ops, 41234 values, worst 0.310 of tolerance (fake device)")
    return 0


def torch_bench(args):
    compiled = "--compile" in args
    wait(70 if compiled else 12)
    out = {"tokens_per_s": 30000.0 if compiled else 24000.0, "step_times_s": [0.1] * 8, "compiled": compiled,
           "warmup_steps": 2 if compiled else 1, "torch": "2.11.0+fake", "note": "DRY RUN: not a measurement"}
    with open(opt(args, "--out"), "w", encoding="utf-8") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    cmd = {"probe": probe, "ftrain": ftrain, "gpu_parity": gpu_parity, "torch_bench": torch_bench}
    sys.exit(cmd[sys.argv[1]](sys.argv[2:]))
