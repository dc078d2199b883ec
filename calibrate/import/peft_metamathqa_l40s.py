#!/usr/bin/env python3
"""Transcribe shared/data/peft-metamathqa-l40s/measurements.csv (PEFT's
MetaMathQA method comparison: Llama-3.2-3B on one L40S, 66 runs) into
ftest.record/1 lines (docs/records.md). Standard library only; run from the
repository root:

    python3 calibrate/import/peft_metamathqa_l40s.py ../shared/data/peft-metamathqa-l40s \
        > calibrate/records/peft-metamathqa-l40s.jsonl

One record per results file, every row (full fine-tuning, LoRA and its
variants, IA3, prompt tuning and the other adapters). What ran, per the data's
README (verified in the PEFT harness at the commit each row records):

- Pure bf16: weights loaded in bf16, no autocast, no GradScaler, no
  checkpointing, no torch.compile, SDPA; adapter weights kept in fp32
  (autocast_adapter_dtype=true); torch.optim.AdamW with states in each
  parameter's dtype; gradient clipping at 1.0.
- Batch 4; samples truncated to 768 tokens, batches from buckets sorted by
  length and padded to their longest sample (dynamic padding): seq_len is the
  bound, avg_tokens_per_step (unpadded) what a step saw on average.
- Memory: max_memory_reserved() over the process (reserved, not allocated),
  the 99th percentile of reserved after each step, and the allocated bytes
  after the optimizer step (model states; not a peak).
- Throughput: unpadded tokens (+1 per sample) per second of step time
  (tokens_per_sec_median over 20 windows, and overall); it/s here is
  steps_completed / step_time_sum_s.

ftest cannot express these runs yet: dynamic padding for all of them; pure
bf16 with fp32 adapters for the LoRA family; PEFT methods other than LoRA.
The config names each feature and `ftest check` reports each record as not
expressible. None carries a tolerance.
"""
import csv
import json
import os
import sys

TARGETS = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o",
           "gate_proj": "gate", "up_proj": "up", "down_proj": "down"}
# LoRA rows whose experiment name marks a variant of plain LoRA.
VARIANTS = (("-dora", "dora"), ("-lorafa", "lora-fa"), ("-mica", "mica"),
            ("-bdlora", "bd-lora"), ("-rslora", "rslora"))


def num(row, key, kind=float):
    text = (row.get(key) or "").strip()
    return kind(float(text)) if text else None


def lora_fields(row, cfg):
    keys = json.loads(row["peft_key_params"] or "{}")
    cfg["lora_rank"] = int(keys.get("r", row["rank"]))
    if "lora_alpha" in keys:
        cfg["lora_alpha"] = keys["lora_alpha"]
    mods = [m for m in row["target_modules"].split(";") if m]
    cfg["lora_targets"] = ",".join(TARGETS[m] for m in mods)
    cfg["adapter_dtype"] = "fp32"  # autocast_adapter_dtype=true
    for suffix, name in VARIANTS:
        if row["experiment_name"].endswith(suffix) or suffix + "-" in row["experiment_name"]:
            cfg["lora_variant"] = name
    if keys.get("use_dora"):
        cfg["lora_variant"] = "dora"
    if keys.get("use_rslora"):
        cfg["lora_variant"] = "rslora"


def config(row):
    method = row["method"].lower()
    cfg = {
        "model": "llama3.2-3b",
        "micro_batch": int(row["batch_size"]),
        "grad_accum": 1,
        "seq_len": int(row["max_seq_length"]),
        "precision": "bf16",
        "zero": 0,
        "offload": "none",
        "checkpointing": "full" if row["use_gc"] == "True" else "none",
        "attention": "sdpa",
        "loss": "standard",
        "optimizer": "adamw",
        "expandable_segments": False,
        "padding": "dynamic_bucketed",
        "max_seq_len": int(row["max_seq_length"]),
        "avg_tokens_per_step": num(row, "avg_tokens_per_step"),
        "grad_clip": 1.0,
        "optimizer_kwargs": json.loads(row["optimizer_kwargs"] or "{}"),
        "peft_method": "full" if method == "full_finetuning" else method,
        "peft_key_params": json.loads(row["peft_key_params"] or "{}"),
        "torch_compile": row["compile"] == "True",
        "empty_cache_every_steps": 10,
    }
    if row["optimizer_type"] != "AdamW":
        cfg["optimizer_impl"] = row["optimizer_type"]
    if method == "lora":
        lora_fields(row, cfg)
    elif method != "full_finetuning":
        cfg["peft_target_modules"] = row["target_modules"]
        cfg["adapter_dtype"] = "fp32"
    return cfg


def measured(row):
    steps = num(row, "steps_completed", int)
    step_sum = num(row, "step_time_sum_s")
    meas = {
        "oom": False,
        "ranks": [{
            "rank": 0,
            "peak_reserved_bytes": num(row, "mem_max_reserved_bytes", int),
            "reserved_p99_bytes": num(row, "mem_reserved_99th_bytes", int),
            "reserved_avg_bytes": num(row, "mem_reserved_avg_bytes", int),
            "allocated_after_step_median_bytes": num(row, "mem_allocated_poststep_avg_median_bytes", int),
            "allocated_after_step_max_bytes": num(row, "mem_allocated_poststep_avg_max_bytes", int),
        }],
        "tokens_per_s": num(row, "tokens_per_sec_overall"),
        "tokens_per_s_median": num(row, "tokens_per_sec_median"),
        "tokens_per_s_min": num(row, "tokens_per_sec_min"),
        "tokens_per_s_max": num(row, "tokens_per_sec_max"),
        "tokens_counted": "unpadded (+1 per sample)",
        "steps_done": steps,
        "step_time_sum_s": step_sum,
        "train_samples": num(row, "train_samples", int),
        "train_total_tokens": num(row, "train_total_tokens", int),
    }
    if steps and step_sum:
        meas["step_time_s"] = step_sum / steps
        meas["it_per_s"] = steps / step_sum
    return meas


def main(folder):
    with open(os.path.join(folder, "measurements.csv"), newline="") as f:
        for row in csv.DictReader(f):
            rec = {
                "schema": "ftest.record/1",
                "source": row["source"],
                "date": row["run_created_at"][:10],
                "framework": "hf",
                "stack": {"torch": row["torch_version"], "transformers": row["transformers_version"],
                          "peft": row["peft_version"], "bitsandbytes": row["bitsandbytes_version"],
                          "datasets": row["datasets_version"], "peft_commit": row["peft_commit_hash"]},
                "method": "measured on 1 real GPU (%s), one process" % row["gpu"],
                "hardware": {"gpu": "l40s-48gb", "gpus_per_node": 1, "nodes": 1},
                "experiment": row["experiment_name"],
                "config": config(row),
                "measured": measured(row),
                "notes": "harness: %s; status %s; %s" % (row["harness"], row["status"], row["row_status"]),
            }
            sys.stdout.write(json.dumps(rec, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: peft_metamathqa_l40s.py FOLDER > records.jsonl")
    main(sys.argv[1])
