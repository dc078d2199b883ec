#!/bin/sh
# make cpu-truth: build the virtual environment of the pinned stack, trace the
# matrix (calibrate/probes/cpu_truth_matrix.py) on the CPU in two processes,
# and write the records in matrix order to $1. Skips with one line where
# PyTorch cannot be installed (no registry, no venv module).
set -u
OUT=${1:-calibrate/records/trace-frameworks-cpu.jsonl}
PY=${PYTHON:-python3}
VENV=build/cpu-truth-venv
REQ=calibrate/probes/cpu-truth-requirements.txt
DS=$(sed -n 's/^# deepspeed==\(.*\)$/\1/p' "$REQ")
skip() { echo "cpu-truth: skipped: $1"; exit 0; }

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import torch, deepspeed' >/dev/null 2>&1; then
    "$PY" -m venv "$VENV" >/dev/null 2>&1 || skip "$PY has no venv module"
    echo "cpu-truth: installing the pinned stack into $VENV (torch is the ~3 GB CUDA build)"
    nice -n 10 "$VENV/bin/pip" install -q -r "$REQ" >"$VENV.log" 2>&1 ||
        skip "PyTorch could not be installed (see $VENV.log)"
    DS_BUILD_OPS=0 nice -n 10 "$VENV/bin/pip" install -q --no-build-isolation "deepspeed==$DS" \
        >>"$VENV.log" 2>&1 || skip "DeepSpeed $DS could not be installed (see $VENV.log)"
fi
"$VENV/bin/python" -c 'import torch' >/dev/null 2>&1 || skip "$VENV cannot import torch"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# Two shards, one per core, one thread each, at low priority: the machine is shared.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
nice -n 10 "$VENV/bin/python" calibrate/probes/cpu_truth.py --shard 0/2 \
    --out "$TMP/shard0.jsonl" 2>"$TMP/log0" &
p0=$!
nice -n 10 "$VENV/bin/python" calibrate/probes/cpu_truth.py --shard 1/2 \
    --out "$TMP/shard1.jsonl" 2>"$TMP/log1" &
p1=$!
rc=0
wait $p0 || rc=1
wait $p1 || rc=1
for i in 0 1; do grep -a '^cpu_truth: ' "$TMP/log$i" | grep -v '^cpu_truth: \[' || true; done
"$VENV/bin/python" calibrate/probes/cpu_truth.py --merge "$TMP/shard0.jsonl" "$TMP/shard1.jsonl" \
    --out "$OUT" || exit 1
exit $rc
