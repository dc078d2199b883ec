"""What the day leaves in its output folder, and the limits it must keep: at
most 8 files (the device tool brings back no more), each under 16 MiB, 64 MiB
together, all at the folder's top level with plain names.

  state.jsonl       the event log: the resume point (state.py)
  manifest.json     what ran, with versions, estimates and durations; what was
                    skipped and why; what is left; the files
  probe.jsonl       the framework probe's records (ftest.record/1)
  ftrain-gpu.jsonl  ftrain --device cuda records (ftest.record/1)
  results.jsonl     checks and benchmarks (op and gradient parity, learning,
                    ftrain against PyTorch) and each call's validation
  log.txt           the driver's log and the tail of every child's output
  plan.txt          the plan with its estimates, where each point landed
  memory-history.jsonl  one line per --memory-history point: the caching
                    allocator's segments and blocks at its reserved peak
                    (calibrate/probes/memory_history.py); each line holds at
                    most MEMORY_HISTORY_MAX_BLOCKS blocks (about a MiB), and the
                    probe drops a point's segments past MEMORY_HISTORY_CAP_BYTES
                    so that the file stays under the 16 MiB a file may have
"""

import json
import os
import re

import plan as pl
import state as st

OUT_FILES = ("state.jsonl", "manifest.json", "probe.jsonl", "ftrain-gpu.jsonl", "results.jsonl",
             "log.txt", "plan.txt", "memory-history.jsonl")
RECORD_FILES = ("probe.jsonl", "ftrain-gpu.jsonl", "results.jsonl")
MAX_FILES = 8
MAX_FILE_BYTES = 16 << 20
MAX_TOTAL_BYTES = 64 << 20
LOG_CAP_BYTES = 12 << 20  # log.txt stops taking child output past this (its head is kept)
MEMORY_HISTORY_FILE = "memory-history.jsonl"
MEMORY_HISTORY_MAX_BLOCKS = 20000      # memory_history.MAX_BLOCKS
MEMORY_HISTORY_CAP_BYTES = 12 << 20    # memory_history.MAX_FILE_BYTES
NAME_OK = re.compile(r"^[A-Za-z0-9._-]+$")


def check_limits(out_dir):
    """The folder against the device tool's limits: (ok, problems, files)."""
    problems, files, total = [], [], 0
    for name in sorted(os.listdir(out_dir)):
        path = os.path.join(out_dir, name)
        if not os.path.isfile(path) or os.path.islink(path):
            problems.append(f"{name}: not a plain file (does not come back)")
            continue
        size = os.path.getsize(path)
        total += size
        files.append({"name": name, "bytes": size})
        if size > MAX_FILE_BYTES:
            problems.append(f"{name}: {size} bytes, over 16 MiB")
        if not NAME_OK.match(name):
            problems.append(f"{name}: a name with characters the tool refuses")
    if len(files) > MAX_FILES:
        problems.append(f"{len(files)} files, more than {MAX_FILES}")
    if total > MAX_TOTAL_BYTES:
        problems.append(f"{total} bytes together, over 64 MiB")
    return not problems, problems, files


def job_summary(plan, state):
    jobs = {}
    for p in plan:
        j = jobs.setdefault(p["job"], {"job": p["job"], "points": 0, "est_s": 0.0, "elapsed_s": 0.0})
        ps = state.point(p["id"])
        j["points"] += 1
        j["est_s"] = round(j["est_s"] + p["est_s"], 2)
        j["elapsed_s"] = round(j["elapsed_s"] + ps.elapsed_s, 2)
        key = ps.outcome if ps.status == "final" else "pending"
        j[key] = j.get(key, 0) + 1
    return list(jobs.values())


def count_records(out_dir):
    out = {}
    for name in RECORD_FILES + (MEMORY_HISTORY_FILE,):
        recs, bad = st.read_jsonl(os.path.join(out_dir, name))
        out[name] = {"lines": len(recs), "unreadable_lines": bad}
    return out


def write_manifest(ctx, plan, status):
    """manifest.json, replaced whole (write, then rename)."""
    s = ctx.state
    points = [{"id": p["id"], "job": p["job"], "tier": p.get("tier", 1), "est_s": p["est_s"],
               **s.point(p["id"]).as_dict()} for p in plan]
    skipped = [{"id": q["id"], "reason": q["message"]} for q in points if q["outcome"] == "skipped"]
    left = [q["id"] for q in points if q["status"] != "final"]
    spent = s.spent_s()
    m = {"schema": "ftest.gpu-day/1", "status": status, "dry_run": ctx.dry_run,
         "budget": {"budget_s": ctx.budget_s, "call_s": ctx.call_s, "spent_s": round(spent, 1),
                    "left_s": round(max(0.0, ctx.budget_s - spent), 1)},
         "calls": [{"call": k, **v} for k, v in sorted(s.calls.items())],
         "environment": {"gpu": ctx.gpu_key, "gpu_name": ctx.gpu_name, "driver": ctx.driver,
                         "versions": ctx.versions, "git": ctx.git, "setup": s.setup[-8:]},
         "records": count_records(ctx.out), "jobs": job_summary(plan, s),
         "skipped": skipped, "left": left, "points": points,
         "next": next_step(status, left)}
    ok, problems, files = check_limits(ctx.out)
    m["files"], m["limits"] = files, {"ok": ok, "problems": problems}
    tmp = ctx.out_file("manifest.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(m, f, indent=1)
    os.replace(tmp, ctx.out_file("manifest.json"))
    return m


def next_step(status, left):
    if not left:
        return "nothing left: commit the records (docs/gpu-day.md, 'After the day')"
    if status == "blocked":
        return (f"{len(left)} points left that this machine cannot run (manifest 'skipped' says "
                "what each lacks)")
    if status == "budget":
        return (f"{len(left)} points left and the budget spent: a later GPU session resumes with "
                "the state carried back and a larger BUDGET_MIN")
    return f"{len(left)} points left: run make gpu-day again with this folder's files (docs/gpu-day.md)"


def plan_text(plan, budget_s, call_s, state=None):
    """The plan as a table: estimate, tier, where the simulation puts each
    point (call n, or skipped), and its state when one is given."""
    where, calls = pl.simulate(plan, budget_s, call_s)
    lines = [f"# make gpu-day plan: {len(plan)} points, {sum(p['est_s'] for p in plan):.0f} s of "
             f"point estimates; budget {budget_s:.0f} s in calls of {call_s:.0f} s",
             "# estimated calls (set-up included): " + ", ".join(f"{c:.0f} s" for c in calls)]
    kinds = {}
    for p in plan:
        k = (p["kind"], where[p["id"]] > 0)
        kinds[k] = kinds.get(k, 0) + 1
    lines.append("# fit the budget: " + ", ".join(f"{n} {k[0]}" for k, n in sorted(kinds.items()) if k[1])
                 + "; over it: " + (", ".join(f"{n} {k[0]}" for k, n in sorted(kinds.items()) if not k[1])
                                    or "none"))
    lines.append(f"{'est_s':>7} tier call  {'state':<9} point")
    for p in plan:
        ps = state.point(p["id"]) if state else None
        sfx = (ps.outcome or ps.status) if ps else ""
        lines.append(f"{p['est_s']:7.1f} {p.get('tier', 1):>4} {where[p['id']] or '-':>4}  {sfx:<9} {p['id']}")
    return "\n".join(lines) + "\n"
