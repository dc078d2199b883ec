# ftest: top-level build.
#
#   make run     build ftest and answer the main job (installs Debian deps as root)
#   make test    build and run every Check suite (and test-torch where PyTorch is importable)
#   make test-torch PYTHON=...   ftrain's gradients against PyTorch + Transformers (needs torch)
#   make cpu-truth   real frameworks traced on the CPU into calibrate/records/trace-frameworks-cpu.jsonl
#   make asan    the same suites under AddressSanitizer + UBSan
#   make fuzz    run the libFuzzer targets for a bounded time (FUZZ_SECONDS each)
#   make bench   benchmarks whose figures go into docs/performance.md
#   make mutation  single-line physics edits on a scratch copy: how many the suite catches
#   make bench-cpu-vs-torch   ftrain against PyTorch on this CPU (needs torch)
#   make install PREFIX=/usr/local   binaries, catalogs, man pages, bash completion
#   make gpu-day OUT=DIR   the GPU day on a lent GPU machine; DRY_RUN=1: its fake-device test
#   make gpu-wheels        what the GPU machine lacks: wheels in .whl/, binaries in .gpuday-bin/
#
# Layout mirrors shared/DESIGN.md and docs/architecture.md: common/ (libftcommon),
# estimator/ (ftest's model), cli/ (ftest's command line, above estimator/
# and calibrate/), trainer/ (ftrain), calibrate/ (records, profiles),
# models/ (JSON catalogs), tests/ (Check).
# The only code shared by estimator and trainer is the model-config reader
# (common/model_config.c, common/json_util.c) and the file handling both
# need to keep records and outputs whole (common/file_io.c): libftcommon.a.

CC       ?= cc
BUILD    ?= build
OPT      ?= -O2 -g
DEPS_PKG := libcjson check yaml-0.1 openblas

# Debian packages that provide everything the build needs.
APT_PKGS := build-essential pkg-config libcjson-dev check libyaml-dev libopenblas-pthread-dev

# ftrain's fp32 matmuls go through OpenBLAS, pinned to Debian's pthread build
# run with one BLAS thread (trainer/ops/ops_matmul_blas.c says why): its own
# pkg-config file, and a run path so the program loads that build whichever
# variant update-alternatives makes the default libopenblas.so.0.
MULTIARCH   := $(shell gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
BLAS_PC_DIR := /usr/lib/$(MULTIARCH)/openblas-pthread/pkgconfig
BLAS_CFLAGS  = $(shell PKG_CONFIG_PATH=$(BLAS_PC_DIR) pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBDIR  = $(shell PKG_CONFIG_PATH=$(BLAS_PC_DIR) pkg-config --variable=libdir openblas 2>/dev/null)
BLAS_LIBS    = -L$(BLAS_LIBDIR) -Wl,-rpath,$(BLAS_LIBDIR) -lopenblas

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wno-unused-parameter -Wvla -Wformat=2
# gcc warns on every bounded snprintf that could truncate; ours are bounded on purpose.
ifeq ($(shell $(CC) --version 2>/dev/null | grep -c clang),0)
WARN     += -Wno-format-truncation
endif
# Every source folder is on the include path: headers are included by name
# (#include "run.h") wherever the layout puts them (docs/architecture.md).
# Not the CUDA backend's folder: its headers are its own (and its check.h
# would hide Check's <check.h> from the tests).
SRC_DIRS := $(sort $(patsubst %/,%,$(dir $(shell find common estimator trainer calibrate cli -name "*.h" 2>/dev/null))))
SRC_INC  := $(addprefix -I,$(filter-out %/cuda,$(SRC_DIRS)))
CFLAGS_BASE := -DFTEST_SOURCE_ROOT=\"$(CURDIR)\" -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE $(WARN) $(OPT) $(SRC_INC)
CJSON_CFLAGS = $(shell pkg-config --cflags libcjson 2>/dev/null)
CJSON_LIBS   = $(shell pkg-config --libs libcjson 2>/dev/null)
# libyaml reads axolotl's training YAML (--axolotl).
YAML_CFLAGS  = $(shell pkg-config --cflags yaml-0.1 2>/dev/null)
YAML_LIBS    = $(shell pkg-config --libs yaml-0.1 2>/dev/null)
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   = $(shell pkg-config --libs check 2>/dev/null)
# The trainer's threads are its own pool (trainer/comm/pool.c); OpenMP only lends
# its simd pragma, without the runtime.
OMP      ?= -fopenmp-simd -DTR_OMP_SIMD
CFLAGS_ALL = $(CFLAGS_BASE) $(CJSON_CFLAGS) $(YAML_CFLAGS) $(BLAS_CFLAGS) $(OMP) $(EXTRA_CFLAGS)
LDLIBS_ALL = $(CJSON_LIBS) $(YAML_LIBS) $(BLAS_LIBS) $(OMP) -lm -lpthread $(EXTRA_LDFLAGS)

# The trainer's kernels may assume floating point never traps (it never
# enables FP exceptions) and that errno is not read after sqrtf: neither
# changes a result, and both let the compiler vectorize the selects of
# tr_expf and the square roots of AdamW.
TR_KERNEL_FLAGS := -fno-trapping-math -fno-math-errno

# ftrain's CUDA backend (trainer/backend/cuda/, issue 11) is built whenever nvcc and
# the cuBLASLt header are found, the CPU-only trainer otherwise; CUDA=0 forces
# CPU-only. sm_80 (A100) and sm_90 (H100/H200) machine code, nothing else, to
# keep the compile short on a small machine.
NVCC      ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_FOUND := $(if $(NVCC),$(if $(wildcard $(CUDA_HOME)/include/cublasLt.h),1,0),0)
CUDA      ?= $(CUDA_FOUND)
CUDA_ARCHS ?= 80 90
ifeq ($(CUDA),1)
CU_SRC    := $(wildcard trainer/backend/cuda/*.cu)
CU_OBJ    := $(CU_SRC:%.cu=$(BUILD)/%.o)
CFLAGS_BASE += -DTR_HAVE_CUDA
LDLIBS_ALL += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++
NVCCFLAGS ?= -std=c++17 -O2 $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
             -Xcompiler -Wall,-Wextra,-Werror $(SRC_INC)
endif

COMMON_SRC := $(sort $(wildcard common/*.c))
# libftest.a: the estimator, calibrate/ and the front door's parts (cli/), all of ftest but its main.
EST_SRC    := $(sort $(shell find estimator -name "*.c")) \
              $(filter-out calibrate/fuzz_%.c,$(wildcard calibrate/*.c)) \
              $(filter-out cli/main.c,$(sort $(wildcard cli/*.c)))
TR_SRC     := $(filter-out trainer/main.c,$(sort $(shell find trainer -name "*.c")))
TEST_SRC   := $(wildcard tests/*.c)

COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/%.o)
EST_OBJ    := $(EST_SRC:%.c=$(BUILD)/%.o)
TR_OBJ     := $(TR_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ   := $(TEST_SRC:%.c=$(BUILD)/%.o)

MAIN_ARGS := --model llama3-8b --gpus 8 --seq 2048

.PHONY: all run test test-torch cpu-truth asan fuzz recipes recipes-accelerate recipes-torchtune bench bench-cpu-vs-torch deps clean docs validation lodo readme man install mutation test-gpu bench-gpu gpu-day gpu-wheels
all: deps $(BUILD)/ftest $(BUILD)/ftrain

# Install what a fresh Debian machine lacks (as root), or say exactly what to run.
deps:
	@if ! command -v pkg-config >/dev/null 2>&1 || ! PKG_CONFIG_PATH=$(BLAS_PC_DIR) pkg-config --exists $(DEPS_PKG); then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "ftest: installing $(APT_PKGS)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PKGS) >/dev/null || exit 2; \
	  else \
	    echo "ftest: missing packages; run: sudo apt-get install -y $(APT_PKGS)"; exit 2; \
	  fi; \
	fi

run: all
	./$(BUILD)/ftest $(MAIN_ARGS)

# The PyTorch parity test runs first where $(PYTHON) has torch and
# transformers (a skip line otherwise), so the Check summary ends the output.
test: deps $(BUILD)/run_tests $(BUILD)/ftest $(BUILD)/ftrain
	@if $(PYTHON) -c 'import torch, transformers' >/dev/null 2>&1; then $(MAKE) --no-print-directory test-torch; \
	else echo "test-torch: skipped: $(PYTHON) cannot import torch and transformers (make test-torch PYTHON=... says how to install them)"; fi
	@# the probes' record writers and runners (their own parts import no framework)
	$(PYTHON) -m unittest discover -s calibrate/probes -p 'test_*.py'
	./$(BUILD)/run_tests

# Gradient parity with PyTorch + Transformers (issue 14): ftrain --dump-grads
# against LlamaForCausalLM's autograd from the same weights and tokens,
# relative L2 <= 1e-5 per tensor (tests/torch/grad_parity.py). Not in CI,
# which has no PyTorch: without it the script says how to install it, exit 0.
PYTHON ?= python3
test-torch: $(BUILD)/ftrain
	$(PYTHON) tests/torch/grad_parity.py --ftrain ./$(BUILD)/ftrain

# Framework truth without a GPU (issue 22): real DDP, DeepSpeed, FSDP1/2 and
# PEFT steps traced storage by storage on the CPU as rank r of N, into
# calibrate/records/trace-frameworks-cpu.jsonl (docs/records.md "cpu-trace"). Builds its
# own virtual environment of the pinned stack (build/cpu-truth-venv); skips
# with one line where PyTorch cannot be installed.
cpu-truth: $(BUILD)/ftest
	PYTHON=$(PYTHON) sh calibrate/probes/cpu_truth.sh calibrate/records/trace-frameworks-cpu.jsonl
	./$(BUILD)/ftest check --quiet calibrate/records/trace-frameworks-cpu.jsonl

# Sanitizer build lives in its own folder so it never mixes objects with the normal one.
asan: deps
	$(MAKE) BUILD=build-asan OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	  OMP= EXTRA_LDFLAGS="-fsanitize=address,undefined" build-asan/run_tests build-asan/ftest build-asan/ftrain
	CK_FORK=no ASAN_OPTIONS=detect_leaks=1 FTEST_BUILD=build-asan ./build-asan/run_tests

# The packages come first: `deps` is an order-only prerequisite of every object,
# so `make -j8` on a fresh machine never compiles before cJSON and Check exist.
$(BUILD)/%.o: %.c | deps
	@mkdir -p $(dir $@)
	@echo "  CC  $<"
	@$(CC) $(CFLAGS_ALL) $(CHECK_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/trainer/ops/ops_%.o $(BUILD)/trainer/optim.o: CFLAGS_ALL += $(TR_KERNEL_FLAGS)

$(BUILD)/libftcommon.a: $(COMMON_OBJ)
	@rm -f $@; ar rcs $@ $^
$(BUILD)/libftest.a: $(EST_OBJ)
	@rm -f $@; ar rcs $@ $^
$(BUILD)/libftrain.a: $(TR_OBJ) $(CU_OBJ)
	@rm -f $@; ar rcs $@ $^

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	@echo "  NVCC $<"
	@$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/ftest: $(BUILD)/cli/main.o $(BUILD)/libftest.a $(BUILD)/libftcommon.a
	$(CC) $(OPT) -o $@ $^ $(LDLIBS_ALL)

$(BUILD)/ftrain: $(BUILD)/trainer/main.o $(BUILD)/libftrain.a $(BUILD)/libftcommon.a
	$(CC) $(OPT) -o $@ $^ $(LDLIBS_ALL)

# Every tests/*.c that defines `Suite *suite_<area>(void)` is registered automatically.
$(BUILD)/suites.h: $(TEST_SRC)
	@mkdir -p $(BUILD)
	@grep -ho 'Suite \*suite_[a-z0-9_]*(void)' $(TEST_SRC) | sort -u | \
	  sed 's/Suite \*\(suite_[a-z0-9_]*\)(void)/SUITE(\1)/' > $@.tmp && mv $@.tmp $@

$(BUILD)/tests/main.o: $(BUILD)/suites.h
$(BUILD)/tests/main.o: CFLAGS_ALL += -I$(BUILD)

$(BUILD)/run_tests: $(TEST_OBJ) $(BUILD)/libftest.a $(BUILD)/libftrain.a $(BUILD)/libftcommon.a
	$(CC) $(OPT) -o $@ $^ $(CHECK_LIBS) $(LDLIBS_ALL)

# GPU checks (issue 11): they need an NVIDIA GPU and a CUDA build, and say so
# in one line (exit 2) where either is missing. test-gpu runs the op harness
# CUDA against CPU (tests/gpu/parity_main.c); bench-gpu is not written yet.
$(BUILD)/gpu_parity: $(BUILD)/tests/gpu/parity_main.o $(BUILD)/tests/trainer_parity.o $(BUILD)/libftrain.a \
                     $(BUILD)/libftcommon.a
	$(CC) $(OPT) -o $@ $^ $(LDLIBS_ALL)
$(BUILD)/tests/gpu/parity_main.o: CFLAGS_ALL += -Itests

test-gpu: deps $(BUILD)/gpu_parity
	./$(BUILD)/gpu_parity

bench-gpu:
	@echo "bench-gpu: needs an NVIDIA GPU and a complete CUDA backend; neither was available (docs/performance.md, GPU section)" >&2
	@exit 2

# The GPU day (docs/gpu-day.md, issue 21). On a machine with one NVIDIA GPU,
# from the repository root: make gpu-day OUT=DIR [BUDGET_MIN=12] [CALL_MIN=9.5]
# runs calibrate/gpu_day/gpu_day.py with the machine's python3 and builds
# nothing (the binaries come from make gpu-wheels, carried in .gpuday-bin/);
# a second call with the same OUT's files continues. make gpu-day DRY_RUN=1
# runs the same driver on a fake device (CI). make gpu-wheels prepares, on a
# machine with PyPI and nvcc, what travels: the wheels (.whl/) and a CUDA
# build of ftrain, ftest and gpu_parity with the static OpenBLAS (.gpuday-bin/).
BUDGET_MIN ?= 12
CALL_MIN   ?= 9.5
DRY_RUN    ?= 0
GPU_BUILD  := build-gpuday
ifeq ($(DRY_RUN),1)
gpu-day: deps $(BUILD)/ftest $(BUILD)/ftrain
	$(PYTHON) -B calibrate/gpu_day/test_gpu_day.py
else
gpu-day:
	@test -n "$(OUT)" || { echo "make gpu-day: give OUT=DIR (docs/gpu-day.md)" >&2; exit 2; }
	$(PYTHON) calibrate/gpu_day/gpu_day.py --out "$(OUT)" --budget-min $(BUDGET_MIN) --call-min $(CALL_MIN) $(GPU_DAY_ARGS)
endif

gpu-wheels: deps
	$(PYTHON) calibrate/gpu_day/pack.py wheels .whl
	$(MAKE) --no-print-directory BUILD=$(GPU_BUILD) CUDA=1 \
	  BLAS_LIBS="$(BLAS_LIBDIR)/libopenblas.a -lgfortran" \
	  $(GPU_BUILD)/ftrain $(GPU_BUILD)/ftest $(GPU_BUILD)/gpu_parity
	$(PYTHON) calibrate/gpu_day/pack.py bin $(GPU_BUILD) .gpuday-bin

# libFuzzer targets: every tests/fuzz/fuzz_<name>.c, seeded from tests/fuzz/corpus/<name>/.
# New inputs go to build-fuzz/corpus/, never into the committed seeds.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
fuzz: deps
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang OMP= \
	  OPT="-O1 -g -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  $(FUZZ_TARGETS:%=build-fuzz/%)
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build-fuzz/corpus/$$t; \
	  ./build-fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    build-fuzz/corpus/$$t tests/fuzz/corpus/$${t#fuzz_} > build-fuzz/$$t.log 2>&1; rc=$$?; \
	  echo "fuzz $$t ($(FUZZ_SECONDS) s): $$(grep -c '' build-fuzz/corpus/$$t/* 2>/dev/null | wc -l) corpus inputs, exit $$rc"; \
	  if [ $$rc != 0 ]; then tail -40 build-fuzz/$$t.log; exit 1; fi; \
	done

$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(BUILD)/libftest.a $(BUILD)/libftrain.a $(BUILD)/libftcommon.a
	@echo "  LD  $@"
	@$(CC) $(CFLAGS_ALL) -fsanitize=fuzzer,address,undefined $^ -o $@ $(LDLIBS_ALL)

# Documents that quote the program are regenerated, never edited by hand
# (tests/docs.c fails when they are stale): the tables of docs/validation.md,
# the worked example and the usage in README.md.
# $(call splice,FILE,MARKER,GENERATED) replaces the lines between
# "<!-- BEGIN MARKER" and "<!-- END MARKER" in FILE with the file GENERATED.
splice = awk -v gen="$(3)" '/<!-- BEGIN $(2)/ { print; while ((getline l < gen) > 0) print l; skip = 1; next } \
	  /<!-- END $(2)/ { skip = 0 } !skip' $(1) > $(1).tmp && mv $(1).tmp $(1)

docs: validation readme
validation: build/ftest
	./build/ftest check --markdown $(sort $(wildcard calibrate/records/*.jsonl)) > build/validation-tables.md || true
	@$(call splice,docs/validation.md,GENERATED,build/validation-tables.md)
# The CPU device of the time ledger measured on this machine (docs/method.md,
# "ftrain's CPU step"): ftrain's own kernels at the tiny models' shapes. Not niced:
# a deprioritised bench would measure its share of a loaded machine, not the cores.
.PHONY: cpu-profile
$(BUILD)/ftrain_ops_bench: calibrate/host/ftrain_ops_bench.c calibrate/host/ftrain_kernel_rates.c calibrate/host/ftrain_wake.c $(BUILD)/libftrain.a $(BUILD)/libftcommon.a
	$(CC) $(CFLAGS_ALL) -o $@ $< calibrate/host/ftrain_kernel_rates.c calibrate/host/ftrain_wake.c $(BUILD)/libftrain.a $(BUILD)/libftcommon.a $(LDLIBS_ALL)
cpu-profile: $(BUILD)/ftrain_ops_bench
	$(BUILD)/ftrain_ops_bench --profile 9 > calibrate/host/cpu-ftrain.json.tmp && mv calibrate/host/cpu-ftrain.json.tmp calibrate/host/cpu-ftrain.json
# ftrain's committed CPU records re-measured (docs/trainer.md, "Step time"): the
# same configurations at FTRAIN_STEPS steps, FTRAIN_PASSES passes into
# FTRAIN_RUNS (resumable), per configuration the median run into FTRAIN_RECORDS
# (the committed file is not written); then their memory through `ftest check`
# and the ledger's it/s error over them. Not niced, as cpu-profile.
# ftrain-cpu-remeasure measures the CPU profile first, so both see one machine.
FTRAIN_RUNS ?= build/ftrain-cpu-runs.jsonl
FTRAIN_RECORDS ?= build/ftrain-cpu-remeasured.jsonl
FTRAIN_STEPS ?= 10
FTRAIN_PASSES ?= 5
.PHONY: ftrain-cpu-records ftrain-cpu-remeasure
ftrain-cpu-records: $(BUILD)/ftrain $(BUILD)/ftest $(BUILD)/run_tests
	python3 calibrate/host/ftrain_records.py --ftrain $(BUILD)/ftrain --steps $(FTRAIN_STEPS) \
	  --passes $(FTRAIN_PASSES) --runs $(FTRAIN_RUNS) --out $(FTRAIN_RECORDS)
	./$(BUILD)/ftest check --quiet $(FTRAIN_RECORDS)
	FTEST_FTRAIN_CPU_RECORDS=$(FTRAIN_RECORDS) CK_RUN_SUITE=cpu_step CK_RUN_CASE=core \
	  ./$(BUILD)/run_tests | grep -E '^cpu_step: .*(rank|median)|cpu_step.c.*records_median' | grep -v CUDA || true
# profile_diff.py names what moved from the profile in use (informational).
ftrain-cpu-remeasure:
	@mkdir -p $(BUILD)
	cp calibrate/host/cpu-ftrain.json $(BUILD)/cpu-ftrain.before.json
	$(MAKE) cpu-profile
	-python3 calibrate/host/profile_diff.py $(BUILD)/cpu-ftrain.before.json calibrate/host/cpu-ftrain.json
	$(MAKE) ftrain-cpu-records
# Leave one dataset out (docs/validation.md): fit without each record file, check it.
lodo: build/ftest
	python3 calibrate/lodo.py build/ftest > build/lodo.md
	@$(call splice,docs/validation.md,LODO,build/lodo.md)
readme: build/ftest
	@{ echo '```'; echo '$$ ftest $(MAIN_ARGS)'; ./build/ftest $(MAIN_ARGS); echo '```'; } > build/readme-example.md || true
	@{ echo '```'; ./build/ftest --help; echo '```'; } > build/readme-usage.md
	@$(call splice,README.md,EXAMPLE,build/readme-example.md)
	@$(call splice,README.md,USAGE,build/readme-usage.md)

# The 30 stock axolotl recipes of tests/recipes/axolotl.tsv, read from a
# checkout of axolotl (not shipped here): make recipes AXOLOTL=/path/to/axolotl
recipes: $(BUILD)/ftest
	@test -n "$(AXOLOTL)" || { echo "usage: make recipes AXOLOTL=/path/to/axolotl-checkout"; exit 2; }
	@tests/recipes/run_axolotl.sh "$(AXOLOTL)" $(RECIPES)

# Published accelerate configs of tests/recipes/accelerate.tsv, read from
# checkouts (or git directories) of accelerate, PEFT and TRL:
# make recipes-accelerate ACCELERATE=DIR PEFT=DIR TRL=DIR
recipes-accelerate: $(BUILD)/ftest
	@ACCELERATE="$(ACCELERATE)" PEFT="$(PEFT)" TRL="$(TRL)" tests/recipes/run_accelerate.sh

# The stock torchtune 0.6.1 configs shipped in tests/recipes/torchtune/ (tests/recipes/torchtune.tsv)
recipes-torchtune: $(BUILD)/ftest
	@tests/recipes/run_torchtune.sh

# Benchmarks (docs/performance.md): each tests/bench/<name>.c is a program of
# its own, run with the ftest binary to time as its argument.
BENCH_BINS := $(patsubst tests/bench/%.c,$(BUILD)/bench_%,$(wildcard tests/bench/*.c))
bench: deps $(BUILD)/ftest $(BENCH_BINS)
	@for b in $(BENCH_BINS); do ./$$b ./$(BUILD)/ftest || exit 1; done
# ftrain against PyTorch + Transformers on this CPU (issue 14), figures spliced
# into docs/performance.md. Needs PyTorch, so not part of CI: without it the
# script says how to install it and exits 0. PYTHON (above) picks the interpreter.
bench-cpu-vs-torch: $(BUILD)/ftrain
	$(PYTHON) tests/bench/cpu_vs_torch.py --ftrain ./$(BUILD)/ftrain --doc docs/performance.md

$(BUILD)/bench_%: tests/bench/%.c $(BUILD)/libftest.a $(BUILD)/libftcommon.a
	@echo "  LD  $@"
	@$(CC) $(CFLAGS_ALL) $^ -o $@ $(LDLIBS_ALL)

# Mutation testing (docs/validation.md, "Mutation testing"): each edit of
# tests/mutation/edits.tsv on a scratch copy in build-mutation/, the whole
# suite and `ftest check` run on each. 8 to 13 minutes; not part of CI.
mutation: deps
	tests/mutation/run.sh

# Man pages: the --help text of each binary, verbatim (docs/man/mkman.sh), so
# the page cannot say something the program does not (tests/frontdoor.c).
MAN_PAGES := $(BUILD)/man/ftest.1 $(BUILD)/man/ftrain.1
man: $(MAN_PAGES)
$(BUILD)/man/ftest.1: $(BUILD)/ftest docs/man/mkman.sh
	@mkdir -p $(dir $@)
	@sh docs/man/mkman.sh $(BUILD)/ftest ftest "will an LLM fine-tune fit in GPU memory, how fast, at what cost" > $@.tmp && mv $@.tmp $@
$(BUILD)/man/ftrain.1: $(BUILD)/ftrain docs/man/mkman.sh
	@mkdir -p $(dir $@)
	@sh docs/man/mkman.sh $(BUILD)/ftrain ftrain "reference Llama trainer with exact memory accounting" > $@.tmp && mv $@.tmp $@

# Installed layout: PREFIX/bin/{ftest,ftrain}; the data the programs read
# (models/ with the GPU and instance catalogs, calibrate/profiles/,
# calibrate/records/) under PREFIX/share/ftest, where ft_data_dir()
# (common/model_config.c) looks beside PREFIX/bin; man pages; completion; the
# docs the help and the man pages name, under PREFIX/share/doc/ftest.
PREFIX  ?= /usr/local
DESTDIR ?=
SHARE_DIR := $(DESTDIR)$(PREFIX)/share/ftest
install: $(BUILD)/ftest $(BUILD)/ftrain $(MAN_PAGES)
	install -d $(DESTDIR)$(PREFIX)/bin $(SHARE_DIR)/models $(SHARE_DIR)/calibrate/profiles \
	  $(SHARE_DIR)/calibrate/records $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 755 $(BUILD)/ftest $(BUILD)/ftrain $(DESTDIR)$(PREFIX)/bin/
	install -m 644 models/*.json $(SHARE_DIR)/models/
	install -m 644 calibrate/profiles/*.json $(SHARE_DIR)/calibrate/profiles/
	install -m 644 calibrate/records/*.jsonl $(SHARE_DIR)/calibrate/records/
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 completion/ftest.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/ftest
	install -m 644 completion/ftest.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/ftrain
	install -d $(DESTDIR)$(PREFIX)/share/doc/ftest
	install -m 644 README.md docs/*.md $(DESTDIR)$(PREFIX)/share/doc/ftest/

clean:
	rm -rf build build-asan build-fuzz build-mutation

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
