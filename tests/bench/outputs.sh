#!/bin/sh
# The outputs a speed change must not move: every command below is run with
# the given ftest binary and its stdout (and exit status) written into DIR, one
# file per command. Save them before a change and compare after it:
#
#   tests/bench/outputs.sh build/ftest /tmp/ref        # before
#   tests/bench/outputs.sh build/ftest /tmp/new        # after
#   diff -r /tmp/ref /tmp/new && echo unchanged        # byte for byte
#
# The set covers the main job, the plan (8B and 70B, and with --global-batch
# free), the inverse questions, timelines and sweeps across the frameworks and
# their options (HF, DeepSpeed stages 0-3, FSDP 1/2, ftrain, LoRA/QLoRA,
# offload, checkpointing, expandable segments, pressure on small cards) and
# `ftest check` over the committed records.
set -u
FTEST=${1:?usage: outputs.sh FTEST DIR}
DIR=${2:?usage: outputs.sh FTEST DIR}
mkdir -p "$DIR"
n=0
run() {
    n=$((n + 1))
    f=$(printf '%s/%03d.out' "$DIR" "$n")
    echo "ftest $*" > "$f"
    "$FTEST" "$@" >> "$f" 2>&1
    echo "exit $?" >> "$f"
}
M8="--model llama3-8b"
run check --markdown calibrate/records/*.jsonl
run $M8 --gpus 8 --seq 2048
run $M8 --gpus 8 --seq 2048 --json
run $M8 --gpus 1 --seq 4096 --json
run $M8 --gpu a100-40gb --gpus 4 --json
run --model qwen1.5-0.5b --gpu rtx3090-24gb --json
run --model llama3-70b --gpus 8 --nodes 4 --json
run plan $M8 --seq 2048 --tokens 1B --json
run plan $M8 --seq 2048 --tokens 1B
run plan --model llama3-70b --seq 2048 --tokens 1B --json
run plan --model qwen1.5-0.5b --seq 1024 --tokens 100M --global-batch free --json
run plan $M8 --seq 4096 --tokens 1B --framework hf --lora-rank 16 --json
run plan $M8 --seq 2048 --tokens 1B --framework fsdp --json
run plan $M8 --seq 2048 --tokens 1B --checkpointing full --max-hours 20 --json
run $M8 --gpu a100-80gb --gpus 8 --zero 3 --max-batch --json
run $M8 --gpu l40s-48gb --gpus 4 --zero 2 --max-seq --json
run $M8 --gpu a10-24gb --zero 3 --min-gpus --json
run --model qwen1.5-0.5b --gpu rtx3090-24gb --framework hf --max-batch --json
for fw in "--framework hf" "--framework deepspeed --zero 0" "--framework deepspeed --zero 1" \
          "--framework deepspeed --zero 2" "--framework deepspeed --zero 3" \
          "--framework fsdp" "--framework fsdp --fsdp-version 2 --zero 3" "--framework ftrain"; do
    run timeline --model qwen1.5-0.5b --gpu rtx3090-24gb --gpus 2 --seq 1024 --batch 2 $fw --json
    run timeline $M8 --gpus 8 --seq 2048 $fw --checkpointing full --json
    run sweep --model qwen1.5-0.5b --gpu rtx3090-24gb --seq 256:4096:256 $fw --csv -
    run sweep $M8 --gpu a100-40gb --gpus 4 --batch 1:16 $fw --csv -
done
run timeline $M8 --gpu a100-80gb --framework hf --lora-rank 16 --json
run timeline $M8 --gpu l4-24gb --framework hf --lora-rank 64 --quant nf4 --checkpointing full --json
run timeline $M8 --gpu l4-24gb --framework hf --lora-rank 8 --quant int8 --lora-targets all-linear --json
run timeline $M8 --gpus 2 --framework deepspeed --zero 3 --offload optimizer+params --json
run timeline $M8 --gpus 2 --framework deepspeed --zero 2 --offload optimizer --json
run timeline $M8 --gpus 4 --framework deepspeed --zero 3 --expandable-segments --json
run timeline --model qwen1.5-0.5b --gpu rtx3090-24gb --framework hf --expandable-segments --batch 8 --json
run timeline --model qwen1.5-0.5b --gpu rtx3090-24gb --framework hf --batch 16 --seq 2048 --json
run timeline --model qwen1.5-0.5b --gpu rtx3090-24gb --framework hf --checkpointing full --optimizer adamw-8bit --json
run timeline --model qwen1.5-0.5b --gpu rtx3090-24gb --framework hf --optimizer-in-backward --activation-offload --json
run timeline $M8 --gpus 8 --framework deepspeed --zero 3 --stack 2024-04 --no-zero-init --json
run sweep $M8 --gpu a100-80gb --gpus 8 --zero 3 --seq 512:16384:512 --expandable-segments --csv -
run sweep $M8 --gpu l40s-48gb --framework hf --lora-rank 16 --quant nf4 --batch 1:32 --csv -
run sweep $M8 --gpu h100-80gb --gpus 8 --framework fsdp --checkpointing full --batch 1:64:4 --csv -
run sweep --model qwen1.5-0.5b --gpu rtx3090-24gb --framework hf --batch 1:48 --seq 1001 --csv -
run --model llama3-8b --gpus 8 --seq 2048 --deepspeed-table
# the strategy table's GPU columns (a card between the allocated and the
# reserved peak replays the allocator within it)
run --model qwen1.5-0.5b --gpu rtx3090-24gb --seq 2048 --batch 4
run --model qwen1.5-0.5b --gpu a100-40gb --seq 4096 --batch 16 --framework hf
run $M8 --gpus 2 --seq 4096
run $M8 --gpus 4 --seq 1024 --batch 3 --expandable-segments
run $M8 --gpus 8 --seq 8192 --framework fsdp
run $M8 --gpus 8 --seq 2048 --batch 6 --framework ftrain
run --model llama3-70b --gpus 8 --nodes 2 --seq 2048
run --model llama3-70b --gpus 8 --nodes 4 --seq 4096 --batch 2 --json
for b in 1 2 3 4 5 6 7 8; do run $M8 --gpu a100-80gb --gpus 8 --seq 2048 --batch $b; done
echo "$n outputs in $DIR"
