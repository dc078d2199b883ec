#!/usr/bin/env python3
"""Derive calibrate/records/probe-h200-2026-11-26.jsonl from this day's raw
probe.jsonl (kept unchanged beside this script), adding the one fact the probe
at git f98e336 got wrong about what it ran.

The probe built its random models with Transformers' no_init_weights() to skip
the initialisers; under transformers 5.17 that also skips tie_weights(), so a
model whose config ties its LM head to its embedding (Llama-3.2-1B,
Qwen2.5-0.5B) ran with a separate, trained head: 1,498,482,688 and 630,167,424
parameters instead of 1,235,814,400 and 494,032,768 (counted on the CPU with
the GPU image's versions, torch 2.11 / transformers 5.17: README.md here).
Only DeepSpeed ZeRO-3 under zero.Init (from_config as usual) kept the tie.
QLoRA did not: its untied random model was saved with both tensors and loaded
back with from_pretrained, whose tie_weights (modeling_utils.py, 5.17) ties
the two only when the checkpoint's values are equal ("both are present in the
checkpoints with different values, so we will NOT tie them"); fill_random drew
them apart, and prepare_model_for_kbit_training then cast both to fp32
(checked on the CPU with the same versions and bitsandbytes 0.50.2: a Linear4bit
model with separate fp32 embed_tokens and lm_head). The ZeRO-3 zero.Init
records, and every Llama-3-8B record (its config does not tie), are copied as
they are; the others name an untied variant of their model, a config file
beside the record file.

Every record also gets the tolerance ftest states for its other one-GPU
records (gpjt-qwen0.5b: 10% on the peak, issue 2), so that `ftest check` in CI
fails a change that moves an H200 estimate past it. No it/s tolerance: the
DeepSpeed one-GPU rows are still 2-3x too fast (docs/validation.md).

The rank-emulated records (torch's fake backend) say so in
hardware.process_group "fake", which the probe at 1e8b0c0 did not write: they
opened no NCCL communicator, so ftest charges them none of its buffers.

Usage: python3 correct.py   (from anywhere; writes the record file)
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
RECORDS = os.path.join(ROOT, "calibrate", "records")
OUT = os.path.join(RECORDS, "probe-h200-2026-11-26.jsonl")


def untied_variant(name):
    """models/NAME.json with the head untied, written beside the records as
    models/NAME-untied.json; returns the record's config.model for it."""
    cfg = json.load(open(os.path.join(ROOT, "models", name + ".json")))
    if not cfg.get("tie_word_embeddings"):
        return None
    head = cfg["vocab_size"] * cfg["hidden_size"]
    ft = cfg["ftest"]
    ft["name"] = name + "-untied"
    ft["params"] = ft["params"] + head
    ft["params_source"] = (f"{name}'s count plus its LM head (vocab_size x hidden_size = {head:,}), "
                           "untied: the GPU probe's build (calibrate/gpu-days/2026-11-26-h200/correct.py)")
    cfg["tie_word_embeddings"] = False
    rel = os.path.join("models", name + "-untied.json")
    with open(os.path.join(RECORDS, rel), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    return rel


def built_untied(rec):
    """Whether the probe built this record's model through no_init_weights,
    before the fix: the day was resumed at git 1e8b0c0, whose probe ties the
    head as from_pretrained does (its records say so in their source)."""
    if "(git f98e336)" not in rec.get("source", ""):
        return False
    mode = rec["config"].get("probe_mode")
    if mode == "deepspeed" and rec["config"].get("zero") == 3 and rec["config"].get("zero_init", True):
        return False
    return True


def main():
    variants = {}
    n_changed = 0
    with open(os.path.join(HERE, "probe.jsonl")) as src, open(OUT + ".tmp", "w") as out:
        for line in src:
            rec = json.loads(line)
            name = rec["config"]["model"]
            if built_untied(rec):
                if name not in variants:
                    variants[name] = untied_variant(name)
                if variants[name]:
                    rec["config"]["model"] = variants[name]
                    rec["correction"] = ("built untied by the probe at f98e336 "
                                         "(calibrate/gpu-days/2026-11-26-h200/correct.py)")
                    n_changed += 1
            if rec["method"].startswith("rank-emulated"):
                rec["hardware"]["process_group"] = "fake"  # no NCCL (docs/records.md)
            rec["tolerance"] = {"peak_rel": 0.10}
            out.write(json.dumps(rec, separators=(",", ":")) + "\n")
    os.replace(OUT + ".tmp", OUT)
    print(f"{OUT}: {n_changed} records name an untied variant")


if __name__ == "__main__":
    main()
