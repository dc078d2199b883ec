"""Tests of make cpu-truth's parts that need no torch: the allocator rounding,
the matrix (its size, pinned settings, names) and what a cpu-trace record
may say. Run by `make test` (tests/calibrate.c runs every test_*.py here)."""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cpu_trace  # noqa: E402
import cpu_truth_matrix as matrix  # noqa: E402
import probe_record as pr  # noqa: E402


class Rounding(unittest.TestCase):
    def test_cuda_allocator_rounding(self):
        # CUDACachingAllocator round_size: multiples of 512 bytes; nothing for 0.
        self.assertEqual(cpu_trace.rounded(0), 0)
        self.assertEqual(cpu_trace.rounded(1), 512)
        self.assertEqual(cpu_trace.rounded(512), 512)
        self.assertEqual(cpu_trace.rounded(513), 1024)
        self.assertEqual(cpu_trace.rounded(4 * 256 * 256), 262144)


class Matrix(unittest.TestCase):
    def setUp(self):
        self.points = matrix.points()

    def test_at_least_300_configuration_ranks(self):
        self.assertGreaterEqual(sum(len(c["ranks"]) for c in self.points), 300)

    def test_names_are_unique(self):
        names = [c["name"] for c in self.points]
        self.assertEqual(len(names), len(set(names)))

    def test_every_world_size_and_framework(self):
        seen = {(c["framework"], c["world"]) for c in self.points}
        for fw in ("ddp", "deepspeed", "fsdp1", "fsdp2"):
            for w in (1, 2, 4, 8):
                self.assertIn((fw, w), seen)

    def test_settings_are_pinned(self):
        need = {"ddp": ("bucket_cap_mb", "optimizer_foreach"),
                "deepspeed": ("reduce_bucket_size", "allgather_bucket_size",
                              "stage3_param_persistence_threshold", "stage3_max_live_parameters",
                              "stage3_max_reuse_distance", "stage3_prefetch_bucket_size",
                              "optimizer_foreach"),
                "fsdp1": ("sharding_strategy", "backward_prefetch", "forward_prefetch",
                          "limit_all_gathers", "optimizer_foreach"),
                "fsdp2": ("reshard_after_forward", "reduce_dtype", "optimizer_foreach")}
        for c in self.points:
            for key in need[c["framework"]]:
                self.assertIn(key, c["settings"], c["name"])

    def test_record_config_uses_ftest_names(self):
        c = next(p for p in self.points if p["framework"] == "fsdp2")
        cfg = matrix.record_config(c)
        self.assertEqual(cfg["fsdp_version"], 2)
        self.assertIn(cfg["fsdp_reduce_dtype"], ("param", "fp32"))
        self.assertEqual(cfg["model_config"]["model_type"], "llama")
        lora = next(p for p in self.points if p["lora"])
        self.assertGreater(matrix.record_config(lora)["lora_rank"], 0)


class Record(unittest.TestCase):
    def run_dict(self, **kw):
        run = {"source": "cpu_truth.py 1 (git test)", "date": "2026-11-25", "framework": "fsdp",
               "method": pr.METHOD_CPU_TRACE, "world_size": 4, "emulated_rank": 3,
               "hardware": {"gpu": "h100-80gb", "gpus_per_node": 4, "nodes": 1},
               "config": {"model": "llama-gqa"}, "stack": {k: None for k in pr.STACK_KEYS},
               "ranks": [{"rank": 3, "peak_allocated_bytes": 1024, "peak_phase": "backward",
                          "trace": {"phase_peak_bytes": {"forward": 512}}}]}
        run.update(kw)
        return run

    def test_cpu_trace_record(self):
        rec = pr.make_record(self.run_dict())
        self.assertTrue(rec["method"].startswith("traced without a GPU (cpu-trace): rank 3 of 4"))
        r = rec["measured"]["ranks"][0]
        self.assertEqual(r["peak_phase"], "backward")
        self.assertEqual(r["trace"]["phase_peak_bytes"]["forward"], 512)
        self.assertNotIn("tolerance", rec)
        json.loads(pr.record_line(rec))

    def test_trace_only_in_cpu_trace_records(self):
        run = self.run_dict(method=pr.METHOD_EMULATED)
        with self.assertRaises(pr.RecordError):
            pr.make_record(run)

    def test_no_step_time(self):
        with self.assertRaises(pr.RecordError):
            pr.make_record(self.run_dict(step_time_s=0.5))


if __name__ == "__main__":
    unittest.main()
