"""Tests of the probe's arguments, its jobs file and the config it records
(no torch needed: these parts of ftest_probe.py import no framework).

The expected configs are written from docs/records.md and ftest's flag names
(README, `ftest --help`), not from the probe's output: a record must name a
run the way `ftest check` reads it (estimator/record.c's keys).
Run: python3 -m unittest discover -s calibrate/probes -p 'test_*.py'
"""

import json
import os
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ftest_probe as fp  # noqa: E402


def config_of(*argv):
    a = fp.parse_args(list(argv))
    return fp.record_config(a, fp.FRAMEWORK_OF[a.mode])


class Configs(unittest.TestCase):
    def test_qlora_nf4_names_as_the_flags(self):
        c = config_of("--mode", "qlora", "--model", "llama3.2-1b", "--lora-r", "8",
                      "--double-quant", "--lora-targets", "q,v")
        # ftest --lora-rank 8 --lora-alpha 16 --lora-targets q,v --quant nf4 (compute dtype
        # auto = the precision's) with double quantization.
        for k, v in {"lora_rank": 8, "lora_alpha": 16, "lora_targets": "q,v", "lora_dropout": 0.0,
                     "quant": "nf4", "compute_dtype": "auto", "double_quant": True,
                     "optimizer": "adamw", "zero": 0, "probe_mode": "qlora"}.items():
            self.assertEqual(c[k], v, k)
        self.assertNotIn("lora", c)  # the old nested form is gone

    def test_int8_has_no_double_quant(self):
        c = config_of("--mode", "qlora", "--quant", "int8", "--double-quant")
        self.assertEqual((c["quant"], c["double_quant"]), ("int8", False))

    def test_adam8bit_is_the_optimizer_name(self):
        self.assertEqual(config_of("--mode", "adam8bit")["optimizer"], "adamw-8bit")
        c = config_of("--mode", "hf", "--optimizer", "adafactor")
        self.assertEqual(c["optimizer"], "adafactor")
        self.assertNotIn("optimizer_impl", c)

    def test_fsdp_versions_and_reduce_dtypes(self):
        c1 = config_of("--mode", "fsdp", "--zero", "2", "--fsdp-backward-prefetch", "post",
                       "--fsdp-forward-prefetch")
        self.assertEqual((c1["fsdp_version"], c1["fsdp_reduce_dtype"], c1["zero"]), (1, "param", 2))
        self.assertEqual((c1["fsdp_backward_prefetch"], c1["fsdp_forward_prefetch"]), ("post", True))
        c2 = config_of("--mode", "fsdp2", "--zero", "3", "--fsdp2-prefetch", "2")
        self.assertEqual((c2["fsdp_version"], c2["fsdp_reduce_dtype"]), (2, "fp32"))
        self.assertEqual(c2["fsdp2_prefetch_layers"], 2)

    def test_fsdp_records_the_dtype_the_model_is_built_in(self):
        # from_config builds in the config's torch_dtype: Llama-3.2-1B's published
        # config.json says bfloat16, so FSDP shards bf16 weights (ftest --load-dtype bf16).
        for mode in ("fsdp", "fsdp2", "fsdp2-trace"):
            self.assertEqual(config_of("--mode", mode, "--zero", "3", "--model", "llama3.2-1b")["load_dtype"],
                             "bf16", mode)
        # a config without a dtype builds in float32
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "config.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"model_type": "llama", "num_hidden_layers": 2}, f)
            self.assertEqual(config_of("--mode", "fsdp2", "--zero", "3", "--model", path)["load_dtype"], "fp32")
        self.assertNotIn("load_dtype", config_of("--mode", "hf"))  # only FSDP reads it

    def test_deepspeed_zero_init_and_offload(self):
        c = config_of("--mode", "deepspeed", "--zero", "3", "--no-zero-init", "--offload",
                      "optimizer")
        self.assertEqual((c["zero"], c["zero_init"], c["offload"]), (3, False, "optimizer"))
        self.assertIn("zero_force_ds_cpu_optimizer false", c["optimizer_impl"])
        self.assertTrue(config_of("--mode", "deepspeed", "--zero", "1")["zero_init"])

    def test_chunked_loss(self):
        c = config_of("--mode", "hf", "--loss", "chunked")
        self.assertEqual(c["loss"], "chunked")
        self.assertIn("liger", c["loss_impl"])


class Refusals(unittest.TestCase):
    def refuse(self, *argv):
        with self.assertRaises(ValueError):
            fp.parse_args(list(argv), fp.JobParser)

    def test_bad_combinations(self):
        self.refuse("--mode", "fsdp", "--optimizer", "adamw-8bit")  # not an HF Trainer mode
        self.refuse("--mode", "deepspeed", "--loss", "chunked")
        self.refuse("--mode", "fsdp", "--zero", "1")
        self.refuse("--mode", "deepspeed", "--zero", "0")
        self.refuse("--mode", "hf", "--steps", "3", "--warmup", "3")
        self.refuse("--mode", "hf", "--world", "8", "--rank", "8")
        self.refuse("--mode", "nope")

    def test_smoke_forces_two_steps(self):
        a = fp.parse_args(["--mode", "hf", "--smoke", "--steps", "9"])
        self.assertEqual((a.steps, a.warmup), (2, 1))


class Jobs(unittest.TestCase):
    def proc(self):
        return types.SimpleNamespace(world=8, rank=7, gpu="h200-141gb", smoke=False)

    def test_process_flags_are_the_process(self):
        a = fp.job_args(self.proc(), {"id": "x", "args": ["--mode", "deepspeed", "--zero", "3"]})
        self.assertEqual((a.world, a.rank, a.gpu), (8, 7, "h200-141gb"))
        with self.assertRaises(ValueError):
            fp.job_args(self.proc(), {"id": "x", "args": ["--mode", "hf", "--rank", "1"]})
        with self.assertRaises(ValueError):
            fp.job_args(self.proc(), {"id": "x", "args": ["--seq", "1"]})  # no mode

    def test_read_jobs(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "jobs.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                f.write(json.dumps({"id": "a", "args": ["--mode", "hf"]}) + "\n\n")
                f.write(json.dumps({"id": "b", "args": ["--mode", "lora"]}) + "\n")
            self.assertEqual([j["id"] for j in fp.read_jobs(path)], ["a", "b"])
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"id": 3, "args": []}) + "\n")
            with self.assertRaises(ValueError):
                fp.read_jobs(path)

    def test_point_is_kept_in_the_record(self):
        a = fp.parse_args(["--mode", "hf", "--model", "tiny-llama"])
        stack = {k: None for k in fp.pr.STACK_KEYS}
        ranks = [{"rank": 0, "peak_allocated_bytes": 1000}]
        rec = json.loads(fp.make_line(a, stack, False, [0.1] * 8, ranks, point="hf/x"))
        self.assertEqual(rec["point"], "hf/x")
        self.assertEqual(rec["measured"]["step_time_s"], 0.1)


class MemoryHistory(unittest.TestCase):
    """--memory-history and the start-of-point free memory (docs/gpu-day.md,
    "Memory history"): what the record and memory-history.jsonl say."""

    def test_start_memory_is_kept_and_the_step_time_is_not(self):
        a = fp.parse_args(["--mode", "hf", "--model", "tiny-llama", "--memory-history", "1000"])
        stack = {k: None for k in fp.pr.STACK_KEYS}
        ranks = [{"rank": 0, "peak_allocated_bytes": 1000, "device_free_at_start_bytes": 7 << 30,
                  "device_total_at_start_bytes": 8 << 30}]
        rec = json.loads(fp.make_line(a, stack, False, [0.1] * 8, ranks, point="hf/x"))
        r0 = rec["measured"]["ranks"][0]
        self.assertEqual((r0["device_free_at_start_bytes"], r0["device_total_at_start_bytes"]),
                         (7 << 30, 8 << 30))
        self.assertNotIn("step_time_s", rec["measured"])  # the recording slowed the steps

    def test_a_negative_count_is_refused(self):
        with self.assertRaises(SystemExit):
            fp.parse_args(["--mode", "hf", "--memory-history", "-1"])

    def test_one_line_beside_the_record(self):
        with tempfile.TemporaryDirectory() as d:
            a = fp.parse_args(["--mode", "lora", "--model", "qwen2.5-0.5b", "--seq", "2048",
                               "--memory-history", "10", "--record", os.path.join(d, "probe.jsonl")])
            a.point = "probe/x"
            snap = {"segments": [{"device": 0, "address": 4096, "total_size": 2 << 20, "stream": 0,
                                  "segment_type": "large",
                                  "blocks": [{"size": 2 << 20, "requested_size": 100,
                                              "state": "active_allocated", "frames": []}]}],
                    "device_traces": [[]]}
            fp.write_memory_history(a, snap, [{"rank": 0, "peak_reserved_bytes": 2 << 20}], False)
            fp.write_memory_history(a, {"segments": [{"address": 1}]}, [], True)  # unreadable: a line saying so
            with open(os.path.join(d, "memory-history.jsonl"), encoding="utf-8") as f:
                lines = [json.loads(x) for x in f]
        self.assertEqual(len(lines), 2)
        self.assertEqual((lines[0]["point"], lines[0]["at"], lines[0]["peak_reserved_bytes"]),
                         ("probe/x", "end", 2 << 20))
        self.assertEqual(lines[0]["segments"][0]["blocks"], [[2 << 20, 100, "a", None]])
        self.assertEqual((lines[0]["model"], lines[0]["seq"], lines[0]["max_entries"]),
                         ("qwen2.5-0.5b", 2048, 10))
        self.assertIn("KeyError", lines[1]["error"])
        self.assertTrue(lines[1]["oom"])


class FakeCuda:
    """torch.cuda as far as run_one uses it, logging the calls in order."""

    def __init__(self, log):
        self.log, self.recording = log, False
        self.memory = types.SimpleNamespace(_record_memory_history=self.record,
                                            _snapshot=self.snapshot)

    def record(self, enabled="all", **kw):
        self.recording = enabled is not None
        self.log.append(("record", enabled, kw.get("max_entries")))

    def snapshot(self):
        self.log.append(("snapshot", self.recording))
        return {"segments": [{"device": 0, "address": 0, "total_size": 4 << 20, "stream": 0,
                              "segment_type": "large", "blocks": [
                                  {"size": 4 << 20, "requested_size": 4 << 20,
                                   "state": "active_allocated", "frames": []}]}],
                "device_traces": [[{"action": "segment_alloc", "addr": 0, "size": 4 << 20},
                                   {"action": "alloc", "addr": 0, "size": 4 << 20}]]}

    def mem_get_info(self):
        self.log.append(("mem_get_info",))
        return (70 << 30, 80 << 30)

    def is_available(self):
        return True

    def synchronize(self):
        pass

    def empty_cache(self):
        pass

    def reset_peak_memory_stats(self):
        pass

    def memory_stats(self):
        return {}

    def max_memory_allocated(self):
        return 4 << 20

    def max_memory_reserved(self):
        return 4 << 20


class RunOneWiring(unittest.TestCase):
    """run_one with a stand-in torch.cuda: the free memory is read before the
    model is built, the history starts at the peaks' reset and stops after
    the snapshot, and the line lands beside the record."""

    def test_order_of_calls(self):
        import probe_run
        log = []
        cuda = FakeCuda(log)
        fake_torch = types.SimpleNamespace(cuda=cuda, OutOfMemoryError=MemoryError)

        def fake_trainer(a, hf_cfg, box):
            log.append(("build",))
            probe_run.reset_peaks(a)
            log.append(("train",))
            return [0.1] * a.steps

        saved = (sys.modules.get("torch"), probe_run.run_trainer)
        sys.modules["torch"], probe_run.run_trainer = fake_torch, fake_trainer
        try:
            with tempfile.TemporaryDirectory() as d:
                a = fp.parse_args(["--mode", "hf", "--memory-history", "50",
                                   "--record", os.path.join(d, "probe.jsonl")])
                oom, _, ranks, _ = fp.run_one(a, {}, {})
                with open(os.path.join(d, "memory-history.jsonl"), encoding="utf-8") as f:
                    line = json.loads(f.read())
        finally:
            if saved[0] is None:
                del sys.modules["torch"]
            else:
                sys.modules["torch"] = saved[0]
            probe_run.run_trainer = saved[1]
        self.assertFalse(oom)
        self.assertEqual(log[:4], [("mem_get_info",), ("build",), ("record", "all", 50), ("train",)])
        self.assertEqual(log[4:6], [("snapshot", True), ("record", None, None)])
        self.assertEqual((ranks[0]["device_free_at_start_bytes"],
                          ranks[0]["device_total_at_start_bytes"]), (70 << 30, 80 << 30))
        self.assertEqual((line["at"], line["reserved_at_bytes"], line["peak_reserved_bytes"]),
                         ("reserved peak", 4 << 20, 4 << 20))


if __name__ == "__main__":
    unittest.main()
