#!/usr/bin/env python3
"""Derive the padded sequence lengths of Liger-Kernel's Hugging Face example
(shared/data/liger-hf-example) from Alpaca and each model's tokenizer, so that
its tokens/s can be checked (docs/validation.md, "Liger's FSDP1 example").

Two stages; run from the repository root.

1. Tokenize (needs tiktoken and the data; not run by the tests):

    python3 calibrate/import/liger_alpaca_lengths.py tokenize \
        --sample prefix=ALPACA_PREFIX.json --sample cleaned=ALPACA_RANDOM.json \
        --llama3 LLAMA3.tiktoken --qwen QWEN.tiktoken \
        > calibrate/import/liger_alpaca_lengths.json

   writes the histogram of token lengths (after truncation at 512) of every
   sample under every tokenizer. No text is kept.

2. Expected lengths (standard library only):

    python3 calibrate/import/liger_alpaca_lengths.py table \
        calibrate/import/liger_alpaca_lengths.json > calibrate/import/liger_alpaca_lengths.md

   and calibrate/import/liger_hf_example.py reads the same JSON to write
   seq_mean into the records.

What the example ran (linkedin/Liger-Kernel examples/huggingface/training.py
at 8d88214 (Llama-3-8B), 03fd603 (Qwen2-7B), 1129508 (Gemma-7B-it), read at
those commits; trl unpinned, v0.9.6 / v0.10.1 read):
- datasets.load_dataset("tatsu-lab/alpaca")["train"].train_test_split(0.1):
  a random 90% of the 52,002 rows; formatting_func returns the "text" column,
  which is stanford_alpaca's train.py PROMPT_DICT prompt, "\\n", then the
  output (the example's response template "### Response:\\n" is in it).
- trl SFTTrainer, not packed: tokenizer(text, add_special_tokens=True,
  truncation=True, max_length=512) with truncation_side="left"
  (_prepare_non_packed_dataloader). So a sample is min(512, tokens + BOS):
  Llama-3 and Gemma add one BOS, Qwen2 none.
- DataCollatorForCompletionOnlyLM(pad_to_multiple_of=16): each rank pads its
  own batch to its longest sample rounded up to 16 (512 is a multiple).
- HF Trainer + accelerate: a RandomSampler; each of the 4 ranks takes its own
  batch of B samples (BatchSamplerShard).

Two lengths follow, for B samples per rank and 4 ranks:
- L_rank = E[ceil16(max of B)]: the mean padded length of a rank's batch.
  The callback's tokens count numel(input_ids) gathered over ranks, that is
  B * sum over ranks of their padded length: tokens per step = 4 B L_rank.
- L_step = E[ceil16(max of 4B)]: FULL_SHARD synchronises the ranks at every
  unit's all-gather and reduce-scatter, so every unit runs as long as the
  rank with the longest batch, the longest of all 4B samples.
Both from the sample's histogram F (share of samples of at most l tokens):
E[ceil16(max of k)] = sum over multiples m of 16 of m (F(m)^k - F(m-16)^k).
The draws are with replacement from the sample (the epoch draws 46,801
without replacement; at B <= 256 the difference is below 0.5%).
The spread is a bootstrap over the sample (fixed seed), printed as sd.

Tokenizers (tiktoken rank files; the same byte-level BPE ranks as the Hugging
Face tokenizer.json the example loaded):
- Llama-3: llama-models 0.3.0 (PyPI) llama_models/llama3/tokenizer.model,
  sha256 82e9d319..., 128,000 ranks, pat_str from its tokenizer.py.
- Qwen2: Qwen2 reuses Qwen's byte-level BPE (151,643 ranks): dashscope (PyPI)
  dashscope/resources/qwen.tiktoken, PAT_STR from its qwen_tokenizer.py; NFC
  applied first (Qwen2's tokenizer.json normalizer). Check: "Hello, world"
  gives 9707, 11, 1879 under both.
- Gemma-7B: NOT OBTAINED. Its SentencePiece model (4.24 MB) is past every
  source reachable here (GitHub snapshots stop at 4 MiB, no PyPI package
  vendors it). Stand-in: the Qwen2 byte-level BPE plus Gemma's BOS. Like
  Gemma's it splits digits one by one; Gemma's 256k vocabulary may give
  somewhat fewer tokens on English. Llama-3's tokenizer plus BOS (the
  llama3-8b rows) is the other stand-in at hand: it differs by under 1%.

Samples (the full alpaca_data.json, 22 MB, is past every source reachable
here; GitHub snapshots stop at 4 MiB):
- prefix: the first 1,805 rows of the original alpaca_data.json (as vendored
  in github.com/wushihong615/LLM-backdoor-detection alpaca_data.json, its two
  injected rows 1-2 dropped; rows 0-334 checked equal to
  github.com/Rock0421/test alpaca_data.json).
- cleaned: 2,000 rows drawn at random from alpaca-cleaned
  (github.com/Antelofski/alpaca-lora alpaca_small.json; 67 of them fall in the
  prefix, 3.4% as a uniform draw gives, 66 of those 67 identical to the
  original, one with a corrected output).
seq_mean comes from the uniform draw ("cleaned"). Against the population's
mean UTF-8 bytes per row (POPULATION_UTF8_BYTES, 902.5) it is 2.5% short
(1.8 standard errors: chance, or the cleaning); the prefix is 7.9% short (5.7
standard errors: the file's order is not random in length), so it is printed
as a check and not used.
"""
import argparse
import json
import math
import random
import sys
import unicodedata

MAX_LEN = 512
PAD_MULTIPLE = 16
GPUS = 4
BOOTSTRAP = 200
SEED = 23

PROMPT_INPUT = ("Below is an instruction that describes a task, paired with an input that provides "
                "further context. Write a response that appropriately completes the request.\n\n"
                "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:")
PROMPT_NO_INPUT = ("Below is an instruction that describes a task. Write a response that "
                   "appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n"
                   "### Response:")
LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# model -> (tokenizer, BOS tokens added by add_special_tokens=True, note)
MODELS = {
    "llama3-8b": ("llama3", 1, "Llama-3 BPE (exact)"),
    "qwen2-7b": ("qwen", 0, "Qwen2 BPE (exact)"),
    "gemma-7b": ("qwen", 1, "stand-in: Qwen2 BPE + BOS (Gemma's tokenizer not obtained)"),
}
# per-device batches of the rows that ran (measurements.csv)
BATCHES = {"llama3-8b": (32, 48, 64), "qwen2-7b": (32, 48, 64), "gemma-7b": (32, 48, 64)}
# The sample the records use: a uniform draw. The prefix is a check on it.
PRIMARY = "cleaned"
# tatsu-lab/alpaca's four string columns, mean UTF-8 bytes per row: the
# dataset_size 47,764,738 of its copy disham993/alpaca-train-validation-test-split
# (the same 52,002 rows and columns, split) over 52,002 rows, less Arrow's 4
# offset bytes per column and row (datasets' num_bytes is the table's nbytes).
POPULATION_UTF8_BYTES = 47764738 / 52002 - 16


def alpaca_text(row):
    """The "text" column of tatsu-lab/alpaca: the prompt, a newline, the output."""
    fmt = PROMPT_INPUT if row.get("input") else PROMPT_NO_INPUT
    return fmt.format(instruction=row["instruction"], input=row.get("input", "")) + "\n" + row["output"]


def load_tiktoken(path, pat, name):
    import base64
    import tiktoken
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    return tiktoken.Encoding(name=name, pat_str=pat, mergeable_ranks=ranks, special_tokens={})


def tokenize(args):
    encs = {"llama3": load_tiktoken(args.llama3, LLAMA3_PAT, "llama3"),
            "qwen": load_tiktoken(args.qwen, QWEN_PAT, "qwen")}
    check = encs["qwen"].encode("Hello, world")
    if check != [9707, 11, 1879]:
        sys.exit("qwen ranks do not give Qwen2's ids for 'Hello, world': %r" % check)
    out = {"max_len": MAX_LEN, "pad_multiple": PAD_MULTIPLE, "gpus": GPUS, "samples": {}}
    for spec in args.sample:
        label, _, path = spec.partition("=")
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
        if label == "prefix":  # LLM-backdoor-detection's two injected rows
            rows = [r for r in rows if "Shihong" not in r["instruction"]
                    and "Qingbing" not in r["instruction"]]
        texts = [alpaca_text(r) for r in rows]
        utf8 = sum(len(r["instruction"].encode()) + len(r.get("input", "").encode())
                   + len(r["output"].encode()) + len(t.encode()) for r, t in zip(rows, texts))
        entry = {"rows": len(rows), "mean_utf8_bytes_4_columns": round(utf8 / len(rows), 1),
                 "histograms": {}}
        for model, (tok, bos, note) in MODELS.items():
            hist = {}
            for t in texts:
                text = unicodedata.normalize("NFC", t) if tok == "qwen" else t
                n = min(MAX_LEN, len(encs[tok].encode_ordinary(text)) + bos)
                hist[n] = hist.get(n, 0) + 1
            entry["histograms"][model] = {"tokenizer": note,
                                          "lengths": sorted([k, v] for k, v in hist.items())}
        out["samples"][label] = entry
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


def padded_cdf(pairs):
    """F at each multiple of 16 up to 512, from [length, count] pairs."""
    total = sum(c for _, c in pairs)
    steps = MAX_LEN // PAD_MULTIPLE
    counts = [0] * (steps + 1)
    for length, c in pairs:
        counts[-(-int(length) // PAD_MULTIPLE)] += c
    cdf, acc = [], 0
    for c in counts:
        acc += c
        cdf.append(acc / total)
    return cdf


def expected_padded_max(cdf, k):
    """E[ceil16(max of k draws)] = sum_m m (F(m)^k - F(m-16)^k)."""
    e, prev = 0.0, 0.0
    for i, f in enumerate(cdf):
        fk = f ** k
        e += i * PAD_MULTIPLE * (fk - prev)
        prev = fk
    return e


def lengths(pairs, batch):
    cdf = padded_cdf(pairs)
    return expected_padded_max(cdf, batch), expected_padded_max(cdf, GPUS * batch)


def bootstrap_sd(pairs, batch, rng):
    flat = [int(l) for l, c in pairs for _ in range(c)]
    rank, step = [], []
    for _ in range(BOOTSTRAP):
        draw = {}
        for _ in flat:
            x = flat[rng.randrange(len(flat))]
            draw[x] = draw.get(x, 0) + 1
        r, s = lengths(sorted(draw.items()), batch)
        rank.append(r)
        step.append(s)

    def sd(v):
        m = sum(v) / len(v)
        return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))
    return sd(rank), sd(step)


def derive(data):
    """model -> batch -> figures, from the primary sample (what the importer writes)."""
    out = {}
    for model in MODELS:
        pairs = data["samples"][PRIMARY]["histograms"][model]["lengths"]
        n = sum(c for _, c in pairs)
        mean = sum(l * c for l, c in pairs) / n
        capped = sum(c for l, c in pairs if l >= MAX_LEN) / n
        rows = {}
        for b in BATCHES[model]:
            r, s = lengths(pairs, b)
            rows[b] = {"rank": r, "step": s}
        out[model] = {"mean": mean, "capped": capped, "n": n, "batches": rows,
                      "tokenizer": data["samples"][PRIMARY]["histograms"][model]["tokenizer"]}
    return out


def table(args):
    with open(args.lengths) as f:
        data = json.load(f)
    rng = random.Random(SEED)
    w = sys.stdout.write
    w("# Padded lengths of Liger-Kernel's HF example (Alpaca, max 512, pad to 16, 4 ranks)\n\n")
    w("Made by `python3 calibrate/import/liger_alpaca_lengths.py table "
      "calibrate/import/liger_alpaca_lengths.json` (the method is in the script's docstring).\n")
    w("L_rank = E[longest of B, rounded up to 16] (tokens per step = 4 B L_rank); L_step = the "
      "same over 4B (the longest rank sets every FULL_SHARD unit's time). sd: bootstrap over the "
      "sample (%d draws, seed %d). The records take L_step as seq_mean and L_rank as "
      "seq_rank_mean from the %s sample, a uniform draw; the prefix (the original file's first "
      "rows, not in random order of length) is a check.\n\n" % (BOOTSTRAP, SEED, PRIMARY))
    w("| sample | rows | mean UTF-8 bytes of the 4 columns | vs tatsu-lab/alpaca (%.1f) |\n"
      "|---|---|---|---|\n" % POPULATION_UTF8_BYTES)
    for label, s in data["samples"].items():
        m = s["mean_utf8_bytes_4_columns"]
        w("| %s | %d | %.1f | %+.1f%% |\n" % (label, s["rows"], m,
                                             100 * (m - POPULATION_UTF8_BYTES) / POPULATION_UTF8_BYTES))
    w("\n| model (tokenizer) | sample | mean tokens | share at 512 | B | L_rank | sd | L_step | sd |\n")
    w("|---|---|---|---|---|---|---|---|---|\n")
    for model, (_, _, note) in MODELS.items():
        sets = sorted(((label, s["histograms"][model]["lengths"]) for label, s in data["samples"].items()),
                      key=lambda x: x[0] != PRIMARY)
        for label, pairs in sets:
            n = sum(c for _, c in pairs)
            mean = sum(l * c for l, c in pairs) / n
            capped = sum(c for l, c in pairs if l >= MAX_LEN) / n
            for b in BATCHES[model]:
                r, s = lengths(pairs, b)
                sr, ss = bootstrap_sd(pairs, b, rng) if label == PRIMARY else (float("nan"),) * 2
                w("| %s (%s) | %s | %.1f | %.2f%% | %d | %.1f | %s | %.1f | %s |\n" % (
                    model, note, label, mean, 100 * capped, b, r,
                    "" if math.isnan(sr) else "%.1f" % sr, s, "" if math.isnan(ss) else "%.1f" % ss))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenize")
    t.add_argument("--sample", action="append", required=True, help="LABEL=alpaca-style.json")
    t.add_argument("--llama3", required=True)
    t.add_argument("--qwen", required=True)
    t.set_defaults(fn=tokenize)
    s = sub.add_parser("table")
    s.add_argument("lengths")
    s.set_defaults(fn=table)
    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
