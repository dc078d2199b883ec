#!/bin/sh
# Generates calibrate/records/ftrain-cpu.jsonl: ftrain CPU records of tiny
# models spanning every knob (ranks, ZeRO stage, offload, checkpointing,
# attention, loss, precision, optimizer, grad-accum, batch, seq, --layers).
# Each record carries "tolerance": {"category_abs_bytes": 0}: `ftest check`
# must match the trainer's arena to the byte in every category. Each record's
# measured.cpu_wait_s says how long its ranks waited for a CPU (the machine's
# other work): run it un-niced and keep the load averages it prints on stderr
# (after each record; calibrate/host/ftrain-cpu-records.log holds those of the
# committed file).
#
#   tests/gen_ftrain_records.sh [OUT]      (default calibrate/records/ftrain-cpu.jsonl)
#   FTRAIN=build-asan/ftrain tests/gen_ftrain_records.sh /tmp/x.jsonl
set -eu
out=${1:-calibrate/records/ftrain-cpu.jsonl}
ftrain=${FTRAIN:-build/ftrain}
[ -x "$ftrain" ] || { echo "gen_ftrain_records: $ftrain is not built (make $ftrain)" >&2; exit 2; }
: > "$out"
loadavg() {
  if [ -r /proc/loadavg ]; then echo "gen_ftrain_records: load average $(cut -d' ' -f1-3 /proc/loadavg) ($1)" >&2; fi
}
loadavg start
n=0
while IFS= read -r args; do
  case "$args" in ''|'#'*) continue ;; esac
  # shellcheck disable=SC2086 # word splitting of the flags is intended
  if ! "$ftrain" --quiet --steps 2 --record "$out" $args; then
    echo "gen_ftrain_records: ftrain failed: $args" >&2
    exit 1
  fi
  n=$((n + 1))
  loadavg "record $n: $args"
done <<'CONFIGS'
# one rank, the plain knobs
--model tiny-llama
--model tiny-llama --attention eager
--model tiny-llama --loss chunked --batch 2 --seq 32
--model tiny-llama --precision bf16-mixed
--model tiny-llama --optimizer sgd
--model tiny-llama --checkpointing selective
--model tiny-llama --checkpointing selective --attention eager
--model tiny-llama --checkpointing full
--model tiny-llama --checkpointing full --attention eager --precision bf16-mixed
--model tiny-llama --grad-accum 3
--model tiny-llama --batch 4 --seq 16
--model tiny-llama --batch 1 --seq 128
--model tiny-llama --batch 3 --seq 24 --loss chunked --attention eager
--model tiny-llama-tied
--model tiny-llama-tied --attention eager --loss chunked --batch 3
--model tiny-qwen2
--model tiny-qwen2 --precision bf16-mixed --checkpointing selective
--model tiny-llama-bias
--model tiny-llama-bias --layers 1
--model tiny-llama-bias --layers 2 --checkpointing full --loss chunked --batch 2 --seq 40
# two ranks, every stage
--model tiny-llama --ranks 2 --zero 0
--model tiny-llama --ranks 2 --zero 1
--model tiny-llama --ranks 2 --zero 2
--model tiny-llama --ranks 2 --zero 3
--model tiny-llama --ranks 2 --zero 1 --offload optimizer
--model tiny-llama --ranks 2 --zero 2 --offload optimizer --precision bf16-mixed
--model tiny-llama --ranks 2 --zero 3 --offload optimizer
--model tiny-llama --ranks 2 --zero 3 --offload optimizer+params
--model tiny-llama --ranks 2 --zero 3 --offload optimizer+params --precision bf16-mixed
--model tiny-llama --ranks 2 --zero 3 --checkpointing full --attention eager
--model tiny-llama --ranks 2 --zero 2 --checkpointing selective --loss chunked
--model tiny-llama --ranks 2 --zero 1 --optimizer sgd --grad-accum 2
--model tiny-llama-tied --ranks 2 --zero 3
--model tiny-llama-tied --ranks 2 --zero 2 --precision bf16-mixed --attention eager
--model tiny-qwen2 --ranks 2 --zero 3 --loss chunked --batch 3
--model tiny-qwen2 --ranks 2 --zero 1 --offload optimizer --optimizer sgd
--model tiny-llama-bias --ranks 2 --zero 3 --layers 2 --checkpointing selective
# three ranks: units that do not divide, padded
--model tiny-llama --ranks 3 --zero 1
--model tiny-llama --ranks 3 --zero 2 --precision bf16-mixed
--model tiny-llama --ranks 3 --zero 3 --checkpointing full
--model tiny-qwen2 --ranks 3 --zero 3 --attention eager --checkpointing selective
--model tiny-qwen2 --ranks 3 --zero 2 --offload optimizer --loss chunked --batch 2 --seq 20
--model tiny-llama-bias --ranks 3 --zero 3 --offload optimizer+params
--model tiny-llama-bias --ranks 3 --zero 1 --optimizer sgd --precision bf16-mixed
# four ranks
--model tiny-llama --ranks 4 --zero 0 --batch 1
--model tiny-llama --ranks 4 --zero 1 --batch 1 --seq 64
--model tiny-llama --ranks 4 --zero 2 --grad-accum 2
--model tiny-llama --ranks 4 --zero 3 --precision bf16-mixed --checkpointing full --loss chunked
--model tiny-llama --ranks 4 --zero 3 --offload optimizer+params --attention eager
--model tiny-llama-tied --ranks 4 --zero 1 --offload optimizer --precision bf16-mixed
--model tiny-llama-tied --ranks 4 --zero 3 --checkpointing selective --optimizer sgd
--model tiny-qwen2 --ranks 4 --zero 2 --attention eager --batch 1 --seq 48
--model tiny-qwen2 --ranks 4 --zero 3 --offload optimizer+params --precision bf16-mixed --loss chunked
--model tiny-llama-bias --ranks 4 --zero 2 --layers 1 --checkpointing full
--model tiny-llama-bias --ranks 4 --zero 3 --attention eager --grad-accum 2 --batch 1
# mixed
--model tiny-llama --ranks 2 --zero 0 --precision bf16-mixed --attention eager --checkpointing selective
--model tiny-llama --ranks 2 --zero 0 --optimizer sgd --loss chunked --seq 64
--model tiny-llama-tied --ranks 3 --zero 0 --checkpointing full --batch 1 --seq 100
--model tiny-qwen2 --ranks 2 --zero 1 --checkpointing full --precision bf16-mixed --layers 1
--model tiny-llama-bias --ranks 2 --zero 0 --attention eager --loss chunked --batch 4 --seq 16
--model tiny-llama --ranks 3 --zero 3 --offload optimizer --optimizer sgd --precision bf16-mixed --checkpointing selective --attention eager --loss chunked --grad-accum 2 --batch 2 --seq 24
CONFIGS
loadavg end
echo "gen_ftrain_records: $n records in $out" >&2
