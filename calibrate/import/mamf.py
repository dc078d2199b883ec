#!/usr/bin/env python3
"""Write the measured matmul ceilings of shared/data/mamf/mamf.csv (maximum
achievable matmul FLOPS, stas00/ml-engineering, torch.mm in bf16 after a
brute-force search over shapes) into the GPU catalog, models/gpus.json, as
each GPU's `matmul_ceiling_tflops` with its source. Standard library only;
run from the repository root:

    python3 calibrate/import/mamf.py ../shared/data/mamf models/gpus.json

A GPU with its own MAMF row takes that row's achieved TFLOP/s. A GPU without
one takes its architecture's measured ratio (the mean achieved/peak of the
NVIDIA bf16 rows of that architecture) times its data-sheet dense bf16 peak,
and the source says so; an architecture with no measured row (Ada) takes the
mean ratio of every NVIDIA bf16 row. The step-time model (estimator/ledger/
gemm.c) prices every GEMM against this ceiling; fp16 runs on the same tensor
cores at the same rate on these cards, and fp32 without TF32 scales the
catalog's fp32 peak by the same ratio.

The rest of the catalog is left as it is (the file is rewritten with the same
two-space layout it has).
"""
import csv
import json
import os
import sys

# Catalog GPU -> the MAMF accelerator measured on the same chip and board.
OWN_ROW = {
    "a100-40gb": "NVIDIA A100 SXM",
    "a100-80gb": "NVIDIA A100 SXM",
    "h100-80gb": "NVIDIA H100 SXM",
    # The table's H100 SXM row says "H200 is the same" (same GH100 compute).
    "h200-141gb": "NVIDIA H100 SXM",
    "b200-180gb": "NVIDIA B200 SXM",
    "gh200-96gb": "NVIDIA GH200 SXM",
}
# Cards without a MAMF row but with a published torch.matmul measurement of
# their own (fp16 in, fp32 accumulate): the best rate measured, its shape and
# where it was published. A measurement of the card beats a ratio borrowed from
# another card of the architecture (GeForce cards run above their rated boost
# clock, on which the data-sheet peak is computed).
OTHER_MEASURED = {
    "rtx3090-24gb": (68.3, [1280, 1280, 1280],
                     "measured, no MAMF row: torch.matmul (cuBLAS) fp16 at M=N=K=1280, 68.27 TFLOP/s "
                     "on an RTX 3090, the best of the cuBLAS column of triton-lang/triton#319 "
                     "(2021-10-04, the matmul tutorial's benchmark, M=N=K 256..1664)"),
}
# MAMF accelerator -> architecture (the NVIDIA rows).
ARCH_OF_ROW = {
    "NVIDIA A100 PCIe": "ampere", "NVIDIA A100 SXM": "ampere",
    "NVIDIA H100 SXM": "hopper", "NVIDIA GH200 SXM": "hopper",
    "NVIDIA B200 SXM": "blackwell", "NVIDIA B300 SXM": "blackwell",
    "NVIDIA GB200 SXM": "blackwell",
}


# The catalog cards with a MAMF fp8_e4m3fn (torch._scaled_mm) row of their own.
FP8_ROW = {
    "h100-80gb": "NVIDIA H100 SXM",
    "h200-141gb": "NVIDIA H200 SXM",
    "b200-180gb": "NVIDIA B200 SXM",
    "gh200-96gb": "NVIDIA GH200 SXM",
}


def read_rows(folder, dtype="bf16"):
    rows = {}
    with open(os.path.join(folder, "mamf.csv"), newline="") as f:
        for r in csv.DictReader(f):
            if r["dtype"] == dtype:
                rows[r["accelerator"]] = r
    return rows


def fp8_ceiling(gpu, rows8, sources):
    """fp8_matmul_ceiling_tflops where the card has an fp8 row; else none (the
    estimator derives it from the data-sheet fp8_tflops at the bf16 ratio)."""
    gpu.pop("fp8_matmul_ceiling_tflops", None)
    if not gpu.get("fp8_tflops"):
        return
    own = FP8_ROW.get(gpu["name"])
    if own and own in rows8:
        r = rows8[own]
        gpu["fp8_matmul_ceiling_tflops"] = round(float(r["mamf_tflops"]), 1)
        src = mamf_source("table) fp8_e4m3fn row: %s %s of %s TFLOP/s, best shape %s (MxNxK), torch %s",
                          own, r)
    else:
        src = ("derived, no MAMF fp8 row for this card: the data-sheet dense FP8 peak x this "
               "card's bf16 matmul ceiling / bf16 peak (the same achieved ratio)")
    sources["fp8_matmul_ceiling"] = src


def mamf_source(row_text, name, r):
    """The source line of a measured MAMF row: where the table is, then row_text
    filled with the row's name, TFLOP/s, theoretical peak, best shape and torch."""
    src = ("MAMF (shared/data/mamf, stas00/ml-engineering@7bc7c3054eb9 compute/accelerator "
           + row_text % (name, r["mamf_tflops"], r["theoretical_tflops"], r["best_shape_MxNxK"],
                         r["torch_version"]))
    if r["notes"]:
        src += " (%s)" % r["notes"]
    return src


def ratios(rows):
    by_arch, every = {}, []
    for name, arch in ARCH_OF_ROW.items():
        r = rows[name]
        ratio = float(r["mamf_tflops"]) / float(r["theoretical_tflops"])
        by_arch.setdefault(arch, []).append((name, ratio))
        every.append((name, ratio))
    return by_arch, every


def mean_source(pairs):
    mean = sum(x for _, x in pairs) / len(pairs)
    listed = ", ".join("%s %.1f%%" % (n.replace("NVIDIA ", ""), 100 * x) for n, x in pairs)
    return mean, listed


def ceiling(gpu, rows, by_arch, every):
    own = OWN_ROW.get(gpu["name"])
    if own:
        r = rows[own]
        src = mamf_source("table): %s bf16 %s of %s TFLOP/s theoretical, best shape %s, torch %s", own, r)
        shape = [int(x) for x in r["best_shape_MxNxK"].split("x")]
        return round(float(r["mamf_tflops"]), 1), src, shape
    if gpu["name"] in OTHER_MEASURED:
        value, shape, src = OTHER_MEASURED[gpu["name"]]
        return value, src, shape
    arch = gpu["arch"]
    pairs = by_arch.get(arch)
    what = "%s's measured ratio" % arch.capitalize()
    if not pairs:
        pairs = every
        what = "no %s card measured: the mean ratio of every NVIDIA bf16 row" % arch.capitalize()
    mean, listed = mean_source(pairs)
    value = round(mean * gpu["bf16_tflops"], 1)
    src = ("derived, no MAMF row for this card: %s (MAMF %s; mean %.1f%%) x the data-sheet dense "
           "bf16 peak %.2f TFLOP/s" % (what, listed, 100 * mean, gpu["bf16_tflops"]))
    return value, src, None


def main(folder, catalog):
    rows = read_rows(folder)
    rows8 = read_rows(folder, "fp8_e4m3fn")
    by_arch, every = ratios(rows)
    with open(catalog) as f:
        cat = json.load(f)
    for gpu in cat["gpus"]:
        value, src, shape = ceiling(gpu, rows, by_arch, every)
        sources = gpu.pop("sources")
        gpu.pop("matmul_ceiling_mnk", None)
        gpu["matmul_ceiling_tflops"] = value
        if shape:  # the M, N, K the ceiling was measured at
            gpu["matmul_ceiling_mnk"] = shape
        sources["matmul_ceiling"] = src
        fp8_ceiling(gpu, rows8, sources)
        gpu["sources"] = sources
    text = json.dumps(cat, indent=2, ensure_ascii=False) + "\n"
    with open(catalog + ".tmp", "w") as f:
        f.write(text)
    os.replace(catalog + ".tmp", catalog)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: mamf.py MAMF_FOLDER models/gpus.json")
    main(sys.argv[1], sys.argv[2])
