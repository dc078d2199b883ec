#!/bin/sh
# The host measurements of docs/method.md ("The host"), from the repository
# root: a STREAM-like bandwidth test and the CPU optimizers, six rounds a minute
# apart (on a shared machine the best round is its capability). Needs a C
# compiler with OpenMP and a venv with torch and deepspeed (pip install torch
# deepspeed; DeepSpeed JIT-builds its cpu_adam op on first use). Appends JSON
# lines to build/hostbench/.
set -e
mkdir -p build/hostbench
cc -O3 -march=native -fopenmp calibrate/host/stream.c -o build/stream
cc -O3 -march=native calibrate/host/stream.c -o build/stream1
PY=${PY:-build/venv/bin/python}
for r in 1 2 3 4 5 6; do
  for t in 1 2; do OMP_NUM_THREADS=$t ./build/stream 512 >> build/hostbench/stream.jsonl; done
  ./build/stream1 512 | sed 's/"threads": 1/"threads": 1, "openmp": false/' >> build/hostbench/stream.jsonl
  OMP_NUM_THREADS=1 "$PY" calibrate/host/cpu_optim_bench.py --params 64e6 --threads 1 --repeats 5 \
    --kinds deepspeed_cpu_adam,torch_adamw_foreach,torch_adamw_fused >> build/hostbench/optim.jsonl 2>/dev/null
  OMP_NUM_THREADS=2 "$PY" calibrate/host/cpu_optim_bench.py --params 64e6 --threads 2 --repeats 5 \
    --kinds deepspeed_cpu_adam,torch_adamw_fused >> build/hostbench/optim.jsonl 2>/dev/null
  sleep 60
done
