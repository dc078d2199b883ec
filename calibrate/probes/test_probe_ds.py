"""The probe's DeepSpeed ZeRO-3 run as rank 7 of 8 under the fake process
group, on the CPU (DS_ACCELERATOR=cpu): the ds-w8-r7 job of the GPU day of
2026-11-26 failed on its first step with "Detected a disagreement on list
length between rank0 and rank7: rank0: -1 rank7: 0" (ZeRO-3's
assert_ints_same_as_other_ranks, whose broadcast from rank 0 the fake backend
does not carry). Each case runs probe_run.run_trainer in a fresh process (the
process group and DeepSpeed's accelerator are per process). Needs torch,
transformers and DeepSpeed: /tmp/probe-venv/bin/python -m unittest
calibrate/probes/test_probe_ds.py
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import deepspeed  # noqa: F401
    import transformers  # noqa: F401
    HAVE_DS = True
except Exception:  # ImportError, or DeepSpeed's accelerator probe failing
    HAVE_DS = False

# A two-block Llama small enough for a CPU step.
TINY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 512,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False}


def child(argv):
    """Runs one ZeRO-3 probe job on the CPU; argv: RANK SKIP(0/1) [flags]."""
    os.environ["DS_ACCELERATOR"] = "cpu"
    sys.path.insert(0, HERE)
    import ftest_probe as fp
    import probe_run
    rank, skip, flags = argv[0], argv[1] == "1", argv[2:]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(TINY, f)
    a = fp.parse_args(["--mode", "deepspeed", "--zero", "3", "--model", f.name,
                       "--world", "8", "--rank", rank, "--seq", "32", "--batch", "1",
                       "--precision", "fp32", "--steps", "3", "--warmup", "1"] + flags)
    a.smoke = True  # the CPU: TrainingArguments(use_cpu), the host's generator
    os.environ["MASTER_PORT"] = str(29600 + os.getpid() % 1000)
    fp.emulate_rank(a)
    if not skip:  # the probe as it was on the GPU day
        probe_run.skip_fake_group_rank_checks = lambda: []
    if os.environ.get("FTEST_TEST_FORCE_OVERFLOW") == "1":
        force_first_overflow()
    box = {}
    times = probe_run.run_trainer(a, fp.model_config(a), box)
    os.unlink(f.name)
    print(f"STEPS {len(times)}")
    engine = box["trainer"].model_wrapped
    print("FIELDS " + json.dumps({**box["step_log"].fields(),
                                  "engine_skipped_steps": getattr(engine, "skipped_steps", None)}))


def force_first_overflow():
    """ZeRO-3's optimizer reports an overflow at its first step, as an fp16
    gradient with an inf would (DeepSpeed 0.19.8 stage3.py step: when
    _loss_scale_update_and_overflow_cleanup returns true it cleans the
    gradients up and returns before the update; engine.py _take_model_step
    then reads optimizer.overflow and adds one to engine.skipped_steps). The
    CPU has no fp16 loss scaler to overflow, so the flag is set by hand."""
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3 as Z3
    original, calls = Z3._loss_scale_update_and_overflow_cleanup, []

    def cleanup(self):
        calls.append(1)
        if len(calls) == 1:
            self.overflow = True
        return original(self)
    Z3._loss_scale_update_and_overflow_cleanup = cleanup


def run_child(*argv, env=None):
    return subprocess.run([sys.executable, os.path.abspath(__file__), "--child"] + list(argv),
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))


@unittest.skipUnless(HAVE_DS, "needs torch, transformers and DeepSpeed")
class ZeroThreeAsRankSeven(unittest.TestCase):
    def test_rank7_trains_with_the_checks_skipped(self):
        r = run_child("7", "1")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("STEPS 3", r.stdout)

    def test_rank7_without_the_skip_fails_as_on_the_gpu_day(self):
        # The control: the failure the fix removes, reproduced on the CPU.
        r = run_child("7", "0")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("disagreement on list length between rank0 and rank7", r.stderr)
        self.assertIn("rank0: -1", r.stderr)

    def test_skipped_steps_are_read_from_the_engine(self):
        # The probe's step_overflow comes from the real engine's skipped_steps:
        # none skipped in fp32, the first one when the optimizer reports an overflow.
        for force, want in (("0", [False, False, False]), ("1", [True, False, False])):
            r = run_child("7", "1", env={"FTEST_TEST_FORCE_OVERFLOW": force})
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            line = [x for x in r.stdout.splitlines() if x.startswith("FIELDS ")][-1]
            fields = json.loads(line[len("FIELDS "):])
            self.assertEqual(fields["step_overflow"], want)
            self.assertEqual(fields["engine_skipped_steps"], sum(want))
            self.assertEqual(fields["step_padded"], [False] * 3)  # the probe's batches: no mask
            self.assertNotIn("memory_by_step", fields)  # the CPU: no allocator to read

    def test_rank7_without_zero_init_trains(self):
        r = run_child("7", "1", "--no-zero-init")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("STEPS 3", r.stdout)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        unittest.main()
