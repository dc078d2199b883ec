#!/usr/bin/env python3
"""Transcribe shared/data/gpjt-qwen0.5b (measurements.csv, oom.csv) into
ftest.record/1 lines (docs/records.md). Standard library only; run from the
repository root:

    python3 calibrate/import/gpjt_qwen05b.py ../shared/data/gpjt-qwen0.5b \
        > calibrate/records/gpjt-qwen0.5b-rtx3090.jsonl

The figures are copied as recorded; nothing is adjusted. What the CSV leaves
implicit is stated in the config (attention sdpa, standard loss, AdamW) per the
data's README.
"""
import csv
import json
import os
import sys

MIB = 1 << 20


def config(row, batch, seq):
    expandable = row["expandable_segments"]
    cfg = {
        "model": "qwen1.5-0.5b",
        "micro_batch": batch,
        "grad_accum": 1,
        "seq_len": seq,
        "precision": "fp16-mixed",
        "zero": int(row["zero_stage"]),
        "offload": "optimizer" if row["optimizer_offload"] == "true" else "none",
        "checkpointing": "full" if row["grad_checkpointing"] == "true" else "none",
        "attention": "sdpa",
        "loss": "standard",
        "optimizer": "adamw",
        "expandable_segments": expandable in ("true", "inferred_true"),
        # README: every sample is padded to seq_len with an explicit mask.
        "padding_mask": True,
        # The same scripts as the 8B series: from_pretrained before the
        # DeepSpeed config exists, so no zero.Init (shared/data/gpjt-llama3-8b).
        "zero_init": False,
        # README: torch 2.2-2.4, transformers 4.40-4.45, deepspeed 0.14.
        "stack": "2024-04",
    }
    if expandable == "inferred_true":
        cfg["expandable_segments_inferred"] = True
    if cfg["offload"] != "none":
        # The README does not say which host ran DeepSpeedCPUAdam (a desktop
        # with one RTX 3090); its DRAM bandwidth decides the step.
        cfg["host_unknown"] = True
    return cfg


def base(row):
    return {
        "schema": "ftest.record/1",
        "source": row["source"],
        "date": "2024-04",
        "framework": "deepspeed",
        "hardware": {"gpu": "rtx3090-24gb", "gpus_per_node": int(row["gpus"]), "nodes": 1},
    }


def main(folder):
    out = sys.stdout
    seen = set()
    with open(os.path.join(folder, "measurements.csv"), newline="") as f:
        for row in csv.DictReader(f):
            first = row["source"] not in seen
            seen.add(row["source"])
            batch, seq = int(row["batch_size"]), int(row["seq_len"])
            it_per_s = float(row["it_per_s"])
            rec = base(row)
            rec["config"] = config(row, batch, seq)
            rec["measured"] = {
                "oom": False,
                "ranks": [{
                    "rank": int(row["gpu_index"]),
                    "peak_active_bytes": int(row["peak_active_mib"]) * MIB,
                    "peak_reserved_bytes": int(row["peak_reserved_mib"]) * MIB,
                }],
                "it_per_s": it_per_s,
                "step_time_s": 1.0 / it_per_s,
                "tokens_per_s": batch * seq * it_per_s,
            }
            rec["tolerance"] = {"peak_rel": 0.10, "it_per_s_rel": 0.25}
            if rec["config"].get("host_unknown"):
                # Its time is the unrecorded host's: judged in the tables
                # (docs/validation.md), not by a pass/fail bound.
                del rec["tolerance"]["it_per_s_rel"]
                rec["notes"] = "CPU offload on an unrecorded host: it/s carries no tolerance"
            if first and "sequence-length" in row["source"]:
                # The first run of a sequence sweep (seq 1) is ~22% slower than
                # the next (seq 2) in both sweeps: one-time warm-up in the run,
                # not a property of the step. Its memory is checked, its it/s not.
                del rec["tolerance"]["it_per_s_rel"]
                rec["notes"] = "first run of the sweep: it/s includes one-time warm-up"
            out.write(json.dumps(rec, separators=(",", ":")) + "\n")
    with open(os.path.join(folder, "oom.csv"), newline="") as f:
        for row in csv.DictReader(f):
            row = dict(row, gpus="1", precision="fp16-mixed")
            rec = base(row)
            rec["config"] = config(row, int(row["batch_size"]), int(row["seq_len"]))
            rec["measured"] = {"oom": True}
            out.write(json.dumps(rec, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gpjt_qwen05b.py FOLDER > records.jsonl")
    main(sys.argv[1])
