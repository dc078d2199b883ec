#!/usr/bin/env python3
"""ftest_probe.py: measure training runs of a real framework and append one
`ftest.record/1` line (docs/records.md) per run.

Runs on a GPU machine only (never in CI); `ftest calibrate --probe MODE` runs it
point by point, `make gpu-day` many points per process (--jobs). The model is
built from a config.json with random weights (no downloads). Modes:

  hf             HF Trainer + PyTorch (DDP at world size 1): --attention eager|sdpa,
                 --checkpointing none|full, --precision bf16-mixed|fp16-mixed|fp32,
                 --optimizer adamw|adamw-8bit|paged-adamw-8bit|paged-adamw-32bit|adafactor|sgd,
                 --loss standard|chunked (Liger's fused linear cross-entropy)
  deepspeed      HF Trainer + DeepSpeed ZeRO --zero 1|2|3, --offload none|optimizer,
                 --no-zero-init (model built before TrainingArguments(deepspeed=...)),
                 --ds-optimizer torch|deepspeed (the optimizer of an offloaded step)
  fsdp           FSDP1 FullyShardedDataParallel, --zero 3 (FULL_SHARD) | 2 (SHARD_GRAD_OP),
                 --fsdp-backward-prefetch pre|post|none, --fsdp-forward-prefetch
  fsdp2          FSDP2 fully_shard per decoder layer, then the root; --fsdp2-prefetch N
  lora           PEFT LoRA (--lora-r, --lora-targets all-linear|q,v) on the decoder
  qlora          PEFT LoRA over a bitsandbytes base: --quant nf4|int8, --double-quant
  adam8bit       HF Trainer with bitsandbytes' 8-bit AdamW (hf --optimizer adamw-8bit)
  fsdp2-trace    FSDP2 under FakeTensorMode with torch's FSDPMemTracker, on the CPU

One GPU standing in for N: --world N --rank r initialises torch.distributed with
the `fake` backend (FakeStore), so each tensor has rank r's shapes and every
collective returns at once. Such records say "rank-emulated" and carry no step
time. Memory is read from the caching allocator (max_memory_allocated,
active_bytes.all.peak, max_memory_reserved) and cudaMemGetInfo (torch.cuda.
mem_get_info); step time is the median of the steps after --warmup.
The card's free and total memory before the model is built go into each rank
as device_free_at_start_bytes and device_total_at_start_bytes. --memory-history
N records the allocator's last N events during training and appends a summary
of its snapshot at the reserved peak (memory_history.py) to
--memory-history-file (default memory-history.jsonl beside --record); such a
record carries no step time (the recording slows the steps).

Many runs in one process: --jobs FILE holds one JSON object a line, {"id": ...,
"args": [...]}, each a run's arguments (not --world, --rank, --gpu, which are the
process's). Before each run the allocator must be empty (a run that finds more
than 256 MiB allocated stops the process, exit 4); each run appends its record
to --record and two lines to --events ({"point", "event": "start"} and
{"point", "event": "end", "outcome": ok|oom|error, "elapsed_s", "message"}). A
run that raises stops the process (exit 3), so a caller can retry it in a fresh
one; an out-of-memory run is a record ("oom": true) and the next run goes on.

--smoke runs a job on the CPU for two steps and writes no record: a check, on a
machine without a GPU, that this probe and the installed frameworks still agree
on their APIs (hf, lora and fsdp2-trace modes).

What fsdp2-trace cannot see: the caching allocator (its reserve and
fragmentation), the CUDA context and library workspaces (cuBLAS, NCCL),
kernels' internal scratch, and time. It sees every tensor FSDP2 and autograd
hold, by module and phase.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import probe_record as pr  # noqa: E402

PROBE_VERSION = "3"  # 3: the per-step keys (docs/records.md, "Per step")
MODES = ("hf", "deepspeed", "fsdp", "fsdp2", "lora", "qlora", "adam8bit", "fsdp2-trace")
FRAMEWORK_OF = {"hf": "hf", "deepspeed": "deepspeed", "fsdp": "fsdp", "fsdp2": "fsdp",
                "lora": "hf", "qlora": "hf", "adam8bit": "hf", "fsdp2-trace": "fsdp"}
HF_MODES = ("hf", "lora", "qlora", "adam8bit")
OPTIMIZERS = ("adamw", "adamw-8bit", "paged-adamw-8bit", "paged-adamw-32bit", "adafactor", "sgd")
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PROCESS_FLAGS = ("--world", "--rank", "--gpu")
DIRTY_BYTES = 256 << 20  # allocated at a run's start that means the last run leaked


class JobParser(argparse.ArgumentParser):
    """A job's arguments (--jobs): a bad one fails that job, not the process."""

    def error(self, message):
        raise ValueError(message)


def build_parser(cls=argparse.ArgumentParser):
    p = cls(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=MODES, required=False)
    p.add_argument("--model", default="tiny-llama",
                   help="shipped model name (models/NAME.json) or a config.json path")
    p.add_argument("--layers", type=int, default=0, help="first K decoder blocks only")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--precision", default="bf16-mixed",
                   choices=("bf16-mixed", "fp16-mixed", "fp32"))
    p.add_argument("--attention", default="sdpa", choices=("eager", "sdpa"))
    p.add_argument("--checkpointing", default="none", choices=("none", "full"))
    p.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3))
    p.add_argument("--offload", default="none", choices=("none", "optimizer"))
    p.add_argument("--no-zero-init", action="store_true")
    p.add_argument("--ds-optimizer", default="torch", choices=("torch", "deepspeed"))
    p.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS)
    p.add_argument("--loss", default="standard", choices=("standard", "chunked"))
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--lora-targets", default="all-linear", choices=("all-linear", "q,v"))
    p.add_argument("--quant", default="nf4", choices=("nf4", "int8"))
    p.add_argument("--double-quant", action="store_true")
    p.add_argument("--fsdp-backward-prefetch", default="pre", choices=("pre", "post", "none"))
    p.add_argument("--fsdp-forward-prefetch", action="store_true")
    p.add_argument("--fsdp2-prefetch", type=int, default=0,
                   help="layers each FSDP2 layer prefetches explicitly (0: FSDP2's implicit one)")
    p.add_argument("--world", type=int, default=1, help="ranks of the job stood for")
    p.add_argument("--rank", type=int, default=0, help="the rank this process stands for")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--gpu", default="h100-80gb", help="key of models/gpus.json")
    p.add_argument("--stack", default="", help="an `ftest stacks` name these versions match")
    p.add_argument("--record", help="append the record to this file")
    p.add_argument("--jobs", help="run every job of this JSON-lines file in this process")
    p.add_argument("--events", help="--jobs: append start and end lines per job here")
    p.add_argument("--memory-history", type=int, default=0, metavar="N",
                   help="record the allocator's last N events during training and append a "
                        "summary of its snapshot to --memory-history-file (0: off)")
    p.add_argument("--memory-history-file",
                   help="default: memory-history.jsonl beside --record")
    p.add_argument("--repeat-short", type=int, default=0, metavar="TOKENS",
                   help="--jobs: at the end of the process, run again each measured point "
                        "of at most TOKENS tokens a micro-batch that ended ok, and append "
                        "its record with repeat_of (0: off)")
    p.add_argument("--smoke", action="store_true", help="CPU, 2 steps, no record (API check)")
    p.add_argument("--versions", action="store_true", help="print the stack and exit")
    return p


def check_args(p, a):
    if not (a.versions or a.jobs) and not a.mode:
        p.error("--mode is required")
    if a.world < 1 or not 0 <= a.rank < a.world:
        p.error("--rank must be in [0, --world)")
    if min(a.seq, a.batch, a.grad_accum, a.steps, a.lora_r) < 1 or a.warmup < 0 \
            or a.warmup >= a.steps or a.fsdp2_prefetch < 0 or a.memory_history < 0 \
            or a.repeat_short < 0:
        p.error("--seq, --batch, --grad-accum, --steps, --lora-r must be positive; --warmup "
                "below --steps; --fsdp2-prefetch, --memory-history and --repeat-short not "
                "negative")
    if a.mode == "adam8bit":
        a.optimizer = "adamw-8bit"
    if a.smoke:
        a.steps, a.warmup = 2, 1
    if a.optimizer != "adamw" and a.mode not in HF_MODES:
        p.error(f"--optimizer {a.optimizer} is for the HF Trainer modes ({', '.join(HF_MODES)})")
    if a.loss == "chunked" and a.mode not in ("hf", "lora"):
        p.error("--loss chunked is for modes hf and lora")
    if a.mode in ("fsdp", "fsdp2") and a.zero not in (2, 3):
        p.error("fsdp modes take --zero 3 (FULL_SHARD) or 2 (SHARD_GRAD_OP)")
    if a.mode == "deepspeed" and a.zero == 0:
        p.error("deepspeed takes --zero 1, 2 or 3")
    if a.smoke and a.mode and a.mode not in ("hf", "lora", "fsdp2-trace"):
        p.error("--smoke runs modes hf, lora and fsdp2-trace")
    return a


def parse_args(argv, cls=argparse.ArgumentParser):
    p = build_parser(cls)
    return check_args(p, p.parse_args(argv))


def versions(with_gpu=True):
    """The software stack, with null for what is not installed."""
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "accelerate", "deepspeed", "peft", "bitsandbytes",
                 "liger_kernel"):
        try:
            mod = __import__(name)
            out[name] = getattr(mod, "__version__", "unknown")
        except Exception:  # an absent or broken package is recorded as absent
            out[name] = None
    out["cuda"] = None
    if out["torch"]:
        import torch
        out["cuda"] = torch.version.cuda
        if with_gpu and torch.cuda.is_available():
            out["gpu_name"] = torch.cuda.get_device_name(0)
            try:
                smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                      "--format=csv,noheader"], capture_output=True, text=True,
                                     timeout=20)
                out["driver"] = smi.stdout.strip() or None
            except (OSError, subprocess.SubprocessError):
                out["driver"] = None
    return out


def git_commit():
    try:
        r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def model_config(a):
    """The HF config.json of --model, truncated to --layers."""
    path = a.model if a.model.endswith(".json") else os.path.join(ROOT, "models", a.model + ".json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    # models/*.json are HF config.json files plus ftest's own "ftest" block.
    hf = {k: v for k, v in cfg.items() if k != "ftest"}
    if a.layers:
        hf["num_hidden_layers"] = min(a.layers, hf["num_hidden_layers"])
    return hf


def built_dtype(a):
    """ftest's name of the dtype from_config builds --model in (its torch_dtype,
    or "dtype" as transformers 5 writes it; float32 when the config has none)."""
    cfg = model_config(a)
    name = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    return {"bfloat16": "bf16", "float32": "fp32"}.get(name, name)


def emulate_rank(a):
    """torch.distributed as rank r of N with the fake backend, or plain world 1."""
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29599")
    # One GPU: every emulated rank runs on device 0.
    os.environ["LOCAL_RANK"] = "0"
    os.environ["RANK"] = str(a.rank)
    os.environ["WORLD_SIZE"] = str(a.world)
    if a.world == 1 or dist.is_initialized():
        return
    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers "fake"
    dist.init_process_group("fake", store=FakeStore(), rank=a.rank, world_size=a.world)


def record_config(a, framework):
    """The run description with ftest's names (docs/records.md), so that
    `ftest check` estimates the same run."""
    config = {"model": a.model, "micro_batch": a.batch, "grad_accum": a.grad_accum,
              "seq_len": a.seq, "precision": a.precision,
              "zero": a.zero if framework != "hf" else 0,
              "offload": a.offload, "checkpointing": a.checkpointing,
              "attention": a.attention, "loss": a.loss, "optimizer": a.optimizer,
              "expandable_segments":
                  "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
              "probe_mode": a.mode}
    if a.layers:
        config["layers"] = a.layers
    if a.stack:
        config["stack"] = a.stack
    if framework == "deepspeed":
        config["zero_init"] = not a.no_zero_init
        if a.offload == "optimizer":
            config["optimizer_impl"] = ("torch AdamW on the host partition "
                                        "(zero_force_ds_cpu_optimizer false)"
                                        if a.ds_optimizer == "torch" else "DeepSpeedCPUAdam")
    if a.mode in ("fsdp", "fsdp2", "fsdp2-trace"):
        config["fsdp_version"] = 1 if a.mode == "fsdp" else 2
        # FSDP1 here reduces in the compute dtype (MixedPrecision(dt, dt, dt)),
        # FSDP2 in fp32 (MixedPrecisionPolicy(reduce_dtype=float32)).
        config["fsdp_reduce_dtype"] = "param" if a.mode == "fsdp" else "fp32"
        # The model is built by from_config, which builds in the config's
        # torch_dtype (models/*.json: bfloat16), so FSDP shards bf16 weights and
        # AdamW keeps bf16 state: ftest's --load-dtype, which only FSDP reads.
        config["load_dtype"] = built_dtype(a)
    if a.mode == "fsdp":
        config["fsdp_backward_prefetch"] = a.fsdp_backward_prefetch
        config["fsdp_forward_prefetch"] = a.fsdp_forward_prefetch
    if a.mode == "fsdp2":
        config["fsdp2_prefetch_layers"] = a.fsdp2_prefetch
    if a.mode in ("lora", "qlora"):
        config.update({"lora_rank": a.lora_r, "lora_alpha": 2 * a.lora_r,
                       "lora_targets": a.lora_targets, "lora_dropout": 0.0})
    if a.mode == "qlora":
        config.update({"quant": a.quant, "compute_dtype": "auto",
                       "double_quant": a.double_quant and a.quant == "nf4"})
    if a.optimizer in ("adamw-8bit", "paged-adamw-8bit", "paged-adamw-32bit"):
        config["optimizer_impl"] = "bitsandbytes " + a.optimizer
    if a.loss == "chunked":
        config["loss_impl"] = "liger-kernel fused linear cross-entropy"
    return config


def device_at_start(a):
    """cudaMemGetInfo before the model is built: (free, total) bytes, or None
    (smoke, the CPU trace). What the caching allocator can reserve at most:
    ftest's capacity replay needs it (docs/records.md)."""
    if a.smoke or a.mode == "fsdp2-trace":
        return None
    import torch
    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return int(free), int(total)


def measure_ranks(a, start=None):
    import torch
    stats = torch.cuda.memory_stats()
    free, total = torch.cuda.mem_get_info()
    at_start = {"device_free_at_start_bytes": start[0],
                "device_total_at_start_bytes": start[1]} if start else {}
    return [{"rank": a.rank, **at_start,
             "peak_allocated_bytes": int(torch.cuda.max_memory_allocated()),
             "peak_active_bytes": int(stats.get("active_bytes.all.peak", 0)) or None,
             "peak_reserved_bytes": int(torch.cuda.max_memory_reserved()),
             # What nvidia-smi shows now (reserved plus the CUDA context); the
             # caching allocator keeps its peak reserve, so this is the peak's.
             "device_used_bytes": int(total - free),
             "device_total_bytes": int(total)}]


def step_fields(box, ranks):
    """The run's per-step notes (probe_steps.StepLog in box["step_log"]):
    the run-wide ones returned, the allocator's by step put in the rank."""
    log = box.get("step_log")
    if log is None:
        return {}
    fields = log.fields()
    memory = fields.pop("memory_by_step", None)
    if memory and ranks:
        ranks[0]["memory_by_step"] = memory
    return fields


def run_one(a, hf_cfg, box):
    """Runs the job; returns (oom, step times, ranks, per-step fields)."""
    import probe_run
    import torch
    if a.mode == "fsdp2-trace":
        peak, by_kind = probe_run.trace_fsdp2(a, hf_cfg)
        return False, [], [{"rank": a.rank, "peak_allocated_bytes": peak,
                            "traced_peak_bytes_by_kind": by_kind}], {}
    oom, times, start = False, [], device_at_start(a)
    try:
        run = probe_run.run_fsdp if a.mode in ("fsdp", "fsdp2") else probe_run.run_trainer
        times = run(a, hf_cfg, box)
    except torch.OutOfMemoryError:
        oom = True
    finally:
        snapshot = probe_run.stop_memory_history(a)
    ranks = [] if a.smoke else measure_ranks(a, start)
    if snapshot is not None:
        write_memory_history(a, snapshot, ranks, oom)
    return oom, times, ranks, step_fields(box, ranks)


def memory_history_path(a):
    if a.memory_history_file:
        return a.memory_history_file
    return os.path.join(os.path.dirname(os.path.abspath(a.record or "probe.jsonl")),
                        "memory-history.jsonl")


def write_memory_history(a, snapshot, ranks, oom):
    """Appends the snapshot's summary (memory_history.py) as one line; a
    snapshot that cannot be summarised is a line with its error, not a failed
    point (the record is the point's result)."""
    import memory_history as mh
    peak = ranks[0].get("peak_reserved_bytes") if ranks else None
    try:
        summary = mh.summarise(snapshot, 0, peak)
    except (KeyError, TypeError, ValueError) as e:
        summary = {"error": f"{type(e).__name__}: {e}"[:400]}
    summary.update({"oom": oom, "max_entries": a.memory_history, "probe_mode": a.mode,
                    "world_size": a.world, "rank": a.rank, "model": a.model, "seq": a.seq})
    path = memory_history_path(a)
    pr.append_line(path, mh.bounded_line(path, getattr(a, "point", None), summary))


def timed(a):
    """Whether the run's step times go into its record: one real GPU, no
    allocator history (whose Python frames slow every allocation)."""
    return a.world == 1 and a.mode != "fsdp2-trace" and not a.memory_history


def make_line(a, stack, oom, times, ranks, point=None, notes=None, steps=None, repeat_of=None):
    framework = FRAMEWORK_OF[a.mode]
    traced = a.mode == "fsdp2-trace"
    method = pr.METHOD_TRACED if traced else (
        pr.METHOD_EMULATED if a.world > 1 else pr.METHOD_MEASURED)
    steady = times[a.warmup:]
    timed_steps = list(times) if timed(a) and times and not oom else None
    run = {
        "source": f"ftest_probe.py {PROBE_VERSION} (git {git_commit()})",
        "date": datetime.date.today().isoformat(),
        "framework": framework, "method": method, "world_size": a.world,
        "emulated_rank": a.rank,
        "hardware": {"gpu": a.gpu, "gpus_per_node": a.world, "nodes": 1},
        "config": record_config(a, framework), "stack": stack, "ranks": ranks, "oom": oom,
        # The allocator's history keeps each event's Python frames: steps run slower.
        "step_time_s": statistics.median(steady)
        if steady and method == pr.METHOD_MEASURED and not a.memory_history else None,
        # Every step's time (warm-up included) and how many were dropped.
        "step_times_s": timed_steps, "warmup_steps": a.warmup if timed_steps else None,
        "tokens_per_step": a.batch * a.seq * a.grad_accum * a.world,
        "notes": notes, "point": point, "repeat_of": repeat_of,
        **(steps or {}),
    }
    return pr.record_line(pr.make_record(run))


def append_event(path, **fields):
    if path:
        pr.append_line(path, json.dumps({**fields, "t": time.time(), "pid": os.getpid()},
                                        allow_nan=False) + "\n")


def allocated_now():
    import torch
    return int(torch.cuda.memory_allocated()) if torch.cuda.is_available() else 0


def job_args(proc, job):
    """A job's arguments with the process's --world, --rank and --gpu."""
    args = [str(x) for x in job.get("args", [])]
    clash = [f for f in PROCESS_FLAGS if f in args]
    if clash:
        raise ValueError(f"job {job.get('id')!r} sets {', '.join(clash)}, which are the process's")
    a = parse_args(args + ["--world", str(proc.world), "--rank", str(proc.rank),
                           "--gpu", proc.gpu] + (["--smoke"] if proc.smoke else []), JobParser)
    if not a.mode:
        raise ValueError(f"job {job.get('id')!r} names no --mode")
    return a


def read_jobs(path):
    jobs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                job = json.loads(line)
                if not isinstance(job, dict) or not isinstance(job.get("id"), str) \
                        or not isinstance(job.get("args"), list):
                    raise ValueError(f"{path}:{n}: a job is {{\"id\": str, \"args\": [...]}}")
                jobs.append(job)
    return jobs


def repeatable(proc, a):
    """--repeat-short: a timed point (one real GPU, no allocator history) of
    at most that many tokens a micro-batch, to run again at the process's end."""
    return 0 < a.seq * a.batch <= getattr(proc, "repeat_short", 0) and timed(a)


def run_job(proc, job, stack, repeat_of=None):
    """One job of --jobs: 0 done (ok or oom), 3 it raised, 4 the allocator was
    not empty before it. With repeat_of (the point it repeats) the record
    names that point as repeat_of instead of point, and the events name
    "POINT#repeat", which the driver does not count as its point."""
    import probe_run
    point = job["id"] + ("#repeat" if repeat_of else "")
    base = 0 if proc.smoke else allocated_now()
    if base > DIRTY_BYTES:
        print(f"ftest_probe: {base} bytes allocated before {point}: a fresh process is needed",
              file=sys.stderr)
        return 4
    append_event(proc.events, point=point, event="start")
    t0, box = time.time(), {}
    try:
        a = job_args(proc, job)
        a.point = point
        if not a.memory_history_file and proc.record:
            a.memory_history_file = os.path.join(os.path.dirname(os.path.abspath(proc.record)),
                                                 "memory-history.jsonl")
        oom, times, ranks, steps = run_one(a, model_config(a), box)
        notes = f"gpu_day point {point}; {base} bytes allocated at its start" if base else None
        if a.memory_history:
            notes = (notes + "; " if notes else "") + (
                f"allocator history recorded (--memory-history {a.memory_history}): no step time")
        if repeat_of:
            notes = (notes + "; " if notes else "") + (
                f"repeat of {repeat_of} at the end of its process (--repeat-short)")
        if not a.smoke:
            line = make_line(a, stack, oom, times, ranks, point=None if repeat_of else point,
                             notes=notes, steps=steps, repeat_of=repeat_of)
            pr.append_line(proc.record, line)
        append_event(proc.events, point=point, event="end", outcome="oom" if oom else "ok",
                     elapsed_s=time.time() - t0, message="")
        if not oom and not repeat_of and repeatable(proc, a):
            proc.repeats.append(job)
        return 0
    except Exception as e:  # recorded as the job's outcome; the caller retries it afresh
        traceback.print_exc()
        msg = (traceback.format_exception_only(type(e), e)[-1].strip())[:400]
        append_event(proc.events, point=point, event="end", outcome="error",
                     elapsed_s=time.time() - t0, message=msg)
        return 3
    finally:
        probe_run.release(box)


def run_jobs(proc):
    stack = versions()
    if not proc.smoke:
        import torch
        if not torch.cuda.is_available():
            print("ftest_probe: no CUDA device (--jobs runs GPU modes)", file=sys.stderr)
            return 2
        if not proc.record:
            print("ftest_probe: --jobs needs --record", file=sys.stderr)
            return 2
    emulate_rank(proc)
    return run_job_list(proc, read_jobs(proc.jobs), stack)


def run_job_list(proc, jobs, stack):
    """Every job in order, then (--repeat-short) the short timed ones that
    ended ok again, in the same order, after every other point of the
    process: the in-process drift of their time. Stops at a job's non-zero
    outcome (run_job)."""
    proc.repeats = []
    for job in jobs:
        rc = run_job(proc, job, stack)
        if rc:
            return rc
    for job in proc.repeats:
        rc = run_job(proc, job, stack, repeat_of=job["id"])
        if rc:
            return rc
    return 0


def main(argv):
    a = parse_args(argv)
    stack = versions()
    print("ftest_probe " + PROBE_VERSION + ": " + json.dumps(stack), file=sys.stderr)
    if a.versions:
        print(json.dumps(stack, indent=1))
        return 0
    if a.jobs:
        return run_jobs(a)
    import probe_run
    import torch
    hf_cfg = model_config(a)
    if a.mode != "fsdp2-trace" and not a.smoke and not torch.cuda.is_available():
        print("ftest_probe: no CUDA device (every mode but fsdp2-trace needs one)", file=sys.stderr)
        return 2
    emulate_rank(a)
    box = {}
    oom, times, ranks, steps = run_one(a, hf_cfg, box)
    probe_run.release(box)
    if a.smoke:
        print(f"ftest_probe: smoke {a.mode}: {len(times)} steps ran on the CPU", file=sys.stderr)
        return 0
    line = make_line(a, stack, oom, times, ranks, steps=steps)
    if a.record:
        pr.append_line(a.record, line)
    else:
        sys.stdout.write(line)
    return 1 if oom else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
