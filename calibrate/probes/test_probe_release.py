"""Two probe runs in one process, on the CPU, as the GPU day runs them
(ftest_probe.py --jobs): what the first run leaves allocated after
probe_run.release. On the GPU day of 2026-11-26 every point but the first of
the rank-emulated groups found memory still allocated (ZeRO-3 ranks 0 and 7 of
8: 3,914,483,712 bytes; FSDP1/FSDP2 ranks 0 and 7: 547,890,176) and stopped
its process for a fresh one (about 15 s each). The CPU stands in for the
caching allocator: the bytes of every tensor storage still reachable, before
the first run and after each release. Each case runs in a fresh process
(the fake process group and DeepSpeed's accelerator are per process). Needs
torch, transformers and DeepSpeed: /tmp/probe-venv/bin/python -m unittest
calibrate/probes/test_probe_release.py
"""

import gc
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
    HAVE_TORCH = True
except Exception:  # ImportError
    HAVE_TORCH = False
try:
    import deepspeed  # noqa: F401
    HAVE_DS = HAVE_TORCH
except Exception:  # ImportError, or DeepSpeed's accelerator probe failing
    HAVE_DS = False

# A two-block Llama small enough for a CPU step: 139,392 parameters, 557,568
# bytes in fp32 (embedding and head 2 x 512 x 64, per block 4 x 64 x 64 for
# q and o, 2 x 64 x 32 for k and v, 3 x 64 x 128 for the MLP, 2 x 64 norms;
# the final norm 64).
TINY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 512,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False}
MODEL_BYTES = 4 * (2 * 512 * 64 + 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64) + 64)


def live_bytes():
    """Bytes of every distinct tensor storage Python's collector can reach."""
    import torch
    seen, n = set(), 0
    for o in gc.get_objects():
        try:
            if isinstance(o, torch.Tensor) and not o.is_meta:
                s = o.untyped_storage()
                if s.data_ptr() and s.data_ptr() not in seen:
                    seen.add(s.data_ptr())
                    n += s.nbytes()
        except (RuntimeError, NotImplementedError):  # a tensor without storage
            continue
    return n


def child(argv):
    """RANK FIX(0/1) MODE [flags]: two runs of one job in this process; prints
    the bytes reachable before the first and after each release."""
    os.environ["DS_ACCELERATOR"] = "cpu"
    sys.path.insert(0, HERE)
    import ftest_probe as fp
    import probe_run
    rank, fix, mode, flags = argv[0], argv[1] == "1", argv[2], argv[3:]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(TINY, f)
    a = fp.parse_args(["--mode", mode, "--model", f.name, "--world", "8", "--rank", rank,
                       "--seq", "32", "--batch", "1", "--precision", "fp32", "--steps", "3",
                       "--warmup", "1"] + flags)
    a.smoke = True  # the CPU: TrainingArguments(use_cpu), FSDP on the CPU, no CUDA sync
    os.environ["MASTER_PORT"] = str(29600 + os.getpid() % 1000)
    fp.emulate_rank(a)
    if not fix:  # the release of the GPU day (1e8b0c0)
        probe_run.free_storages = lambda box: 0
        probe_run.forget_ds_module_stack = lambda: 0
    run = probe_run.run_fsdp if mode in ("fsdp", "fsdp2") else probe_run.run_trainer
    gc.collect()
    print(f"BEFORE {live_bytes()}")
    for i in (1, 2):
        box = {}
        times = run(a, fp.model_config(a), box)
        probe_run.release(box)
        print(f"RUN {i} STEPS {len(times)} LEFT {live_bytes()}", flush=True)
    os.unlink(f.name)


def run_child(*argv):
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"] + list(argv),
                       capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    vals = {}
    for line in r.stdout.splitlines():
        w = line.split()
        if w and w[0] == "BEFORE":
            vals["before"] = int(w[1])
        elif w and w[0] == "RUN":
            vals[f"steps{w[1]}"], vals[f"left{w[1]}"] = int(w[3]), int(w[5])
    return r, vals


@unittest.skipUnless(HAVE_TORCH, "needs torch and transformers")
class TwoRunsInOneProcess(unittest.TestCase):
    def check_released(self, *argv):
        r, v = run_child("7", "1", *argv)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual((v["steps1"], v["steps2"]), (3, 3))
        # What stays after a release is not the model's: under a tenth of its
        # fp32 bytes (the leaks were all of it: the whole model, or rank 7's
        # shard of it and its full copy).
        for k in ("left1", "left2"):
            self.assertLess(v[k] - v["before"], MODEL_BYTES / 10, (k, v))
        return v

    def check_leaked(self, *argv):
        # The control: the release of the GPU day leaves at least rank 7's
        # shard of the fp32 model (an eighth) after each run.
        r, v = run_child("7", "0", *argv)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertGreater(v["left1"] - v["before"], 0.9 * MODEL_BYTES / 8, v)
        self.assertGreater(v["left2"] - v["left1"], 0.9 * MODEL_BYTES / 8, v)

    @unittest.skipUnless(HAVE_DS, "needs torch, transformers and DeepSpeed")
    def test_zero3_rank7_second_run_trains_and_nothing_stays(self):
        # Also the GPU day's suspicion that ZeRO-3's cross-rank check comes
        # back after the first point: the second run trains its 3 steps.
        self.check_released("deepspeed", "--zero", "3")

    @unittest.skipUnless(HAVE_DS, "needs torch, transformers and DeepSpeed")
    def test_zero3_rank7_leaked_without_the_fix(self):
        self.check_leaked("deepspeed", "--zero", "3")

    def test_fsdp1_rank7_nothing_stays(self):
        self.check_released("fsdp", "--zero", "3")

    def test_fsdp1_rank7_leaked_without_the_fix(self):
        self.check_leaked("fsdp", "--zero", "3")

    def test_fsdp2_rank7_nothing_stays(self):
        self.check_released("fsdp2", "--zero", "3")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        unittest.main()
