"""Tests of make cpu-truth's parts that need no torch: the allocator rounding,
the matrix (its size, pinned settings, names) and what a cpu-trace record
may say. Run by `make test` (tests/calibrate.c runs every test_*.py here)."""

import contextlib
import io
import json
import os
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cpu_trace  # noqa: E402
import cpu_truth  # noqa: E402
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


class FreshProcess(unittest.TestCase):
    """zero.Init replaces torch.nn.functional.linear with DeepSpeed's
    zero3_linear_wrap and never restores it (DeepSpeed 0.19.8
    runtime/zero/partition_parameters.py, _enable_mem_efficient_linear), so a
    ZeRO-3 point without zero.Init traced after a zero.Init point in the same
    process is not what its name says. The runner's main() is run over the
    whole matrix with the tracing replaced by a stand-in that remembers, per
    simulated process, whether a zero.Init point ran in it; spawn (how
    run_fresh starts the script again) is replaced by a stand-in that runs
    main() with the same arguments in a new simulated process."""

    def setUp(self):
        self.seen = []            # (name, rank, zero.Init ran before in its process)
        self.process = {"zero_init_ran": False}

    def fake_trace_one(self, c, r):
        self.seen.append((c["name"], r, self.process["zero_init_ran"]))
        if cpu_truth.enters_zero_init(c):
            self.process["zero_init_ran"] = True
        entry = {"rank": r, "peak_allocated_bytes": 4096, "peak_phase": "backward",
                 "trace": {"attention_ops": [], "trace_s": 0.0}}
        return entry, {}

    def fake_spawn(self, argv):
        # A new process: nothing ran in it before.
        outer, self.process = self.process, {"zero_init_ran": False}
        try:
            rc = cpu_truth.main(argv)
        finally:
            self.process = outer
        return rc, ""

    def run_runner(self, argv):
        stack = {k: None for k in pr.STACK_KEYS}
        with mock.patch.object(cpu_truth, "trace_one", self.fake_trace_one), \
                mock.patch.object(cpu_truth, "spawn", self.fake_spawn), \
                mock.patch.object(cpu_truth, "versions", lambda: stack), \
                mock.patch.object(cpu_truth, "single_thread", lambda: None), \
                mock.patch.object(cpu_truth, "git_commit", lambda: "test"), \
                contextlib.redirect_stdout(io.StringIO()) as out, \
                contextlib.redirect_stderr(io.StringIO()):
            rc = cpu_truth.main(argv)
        self.assertEqual(rc, 0)
        return [json.loads(line) for line in out.getvalue().splitlines()]

    def test_no_zero3_noinit_point_follows_zero_init(self):
        noinit = {(c["name"], r) for c in matrix.points() for r in c["ranks"]
                  if c["framework"] == "deepspeed" and c["zero"] == 3 and not c["zero_init"]}
        self.assertGreaterEqual(len(noinit), 8)
        for shards in (["--shard", "0/1"], ["--shard", "0/2"], ["--shard", "1/2"]):
            self.seen = []
            records = self.run_runner(shards)
            self.assertEqual(len(records), len(self.seen), shards)
            traced = {(name, r) for name, r, _ in self.seen}
            for name, r, after_init in self.seen:
                if (name, r) in noinit:
                    self.assertFalse(after_init, f"{name} rank {r} after zero.Init ({shards})")
            if shards[1] == "0/1":
                self.assertEqual(traced, {(c["name"], r) for c in matrix.points()
                                          for r in c["ranks"]})

    def test_the_matrix_order_alone_would_mix_them(self):
        # Without the runner's fresh processes the hazard is real: in matrix
        # order (and in each of make cpu-truth's two shards) a z3-noinit point
        # follows a z3-init point.
        for i in (0, 1):
            pts = [(c, r) for c in matrix.points() for r in c["ranks"]][i::2]
            first_init = next(n for n, (c, _) in enumerate(pts) if cpu_truth.enters_zero_init(c))
            self.assertTrue(any(cpu_truth.fresh_process(c) for c, _ in pts[first_init:]))

    def test_fresh_points_in_their_own_process(self):
        kinds = {(c["name"], r): k for k, c, r in
                 cpu_truth.schedule([(c, r) for c in matrix.points() for r in c["ranks"]])}
        for c in matrix.points():
            for r in c["ranks"]:
                want = "fresh" if (c["framework"] == "deepspeed" and c["zero"] == 3
                                   and not c["zero_init"]) else "here"
                self.assertEqual(kinds[(c["name"], r)], want, c["name"])


if __name__ == "__main__":
    unittest.main()
