"""Tests of the probe's record writer on fixtures (no torch needed).

Each fixtures/NAME.run.json is what ftest_probe.py would gather; NAME.expected.json
is the record written by hand from docs/records.md (it/s and tokens/s derived
in the fixture's comment in this file), not produced by the writer.
Run: python3 -m unittest discover -s calibrate/probes -p 'test_*.py'
"""

import copy
import json
import math
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import probe_record as pr  # noqa: E402


def load(name):
    with open(os.path.join(HERE, "fixtures", name), encoding="utf-8") as f:
        return json.load(f)


class Fixtures(unittest.TestCase):
    def check(self, name):
        run = load(name + ".run.json")
        want = load(name + ".expected.json")
        got = pr.make_record(run)
        self.assertEqual(got, want)
        # The stack keeps the named keys first, in a fixed order, so records diff well.
        self.assertEqual(list(got["stack"]), list(want["stack"]))
        line = pr.record_line(got)
        self.assertTrue(line.endswith("\n"))
        self.assertEqual(line.count("\n"), 1)
        self.assertEqual(json.loads(line), want)

    def test_measured_hf(self):
        # step 0.5 s: it/s = 1 / 0.5 = 2; 2 x 1024 tokens per step: 2048 / 0.5 = 4096 tokens/s.
        self.check("measured_hf")

    def test_emulated_zero3_drops_nulls(self):
        # peak_reserved_bytes null is left out, never written as 0.
        self.check("emulated_zero3")

    def test_oom_has_no_time(self):
        # An OOM run's step time is not a step time.
        self.check("oom_fsdp")


class Refusals(unittest.TestCase):
    def setUp(self):
        self.run = load("measured_hf.run.json")

    def refuse(self, run, words):
        with self.assertRaises(pr.RecordError) as ctx:
            pr.make_record(run)
        self.assertIn(words, str(ctx.exception))

    def test_emulated_step_time_is_refused(self):
        run = load("emulated_zero3.run.json")
        run["step_time_s"] = 0.7
        self.refuse(run, "carries no step time")

    def test_traced_needs_a_rank(self):
        run = load("emulated_zero3.run.json")
        run["method"] = "traced"
        run["emulated_rank"] = 8
        self.refuse(run, "needs emulated_rank")

    def test_fractional_bytes(self):
        self.run["ranks"][0]["peak_allocated_bytes"] = 1.5e9
        self.refuse(self.run, "whole number of bytes")

    def test_negative_bytes(self):
        self.run["ranks"][0]["peak_reserved_bytes"] = -1
        self.refuse(self.run, "must not be negative")

    def test_nan_step_time(self):
        self.run["step_time_s"] = math.nan
        self.refuse(self.run, "positive and finite")

    def test_stack_must_be_complete(self):
        del self.run["stack"]["bitsandbytes"]
        self.refuse(self.run, "the stack lacks bitsandbytes")

    def test_world_matches_hardware(self):
        self.run["world_size"] = 8
        self.refuse(self.run, "world_size is 8")

    def test_rank_outside_world(self):
        self.run["ranks"][0]["rank"] = 1
        self.refuse(self.run, "outside [0, 1)")

    def test_no_peak(self):
        self.run["ranks"] = [{"rank": 0, "peak_reserved_bytes": 10}]
        self.refuse(self.run, "neither peak_allocated_bytes nor peak_active_bytes")

    def test_ran_but_no_ranks(self):
        self.run["ranks"] = []
        self.refuse(self.run, "must report its ranks")

    def test_unknown_framework_and_method(self):
        run = copy.deepcopy(self.run)
        run["framework"] = "jax"
        self.refuse(run, "framework 'jax'")
        self.run["method"] = "guessed"
        self.refuse(self.run, "unknown method")

    def test_nan_in_config_is_refused_by_the_line(self):
        rec = pr.make_record(self.run)
        rec["config"]["lr"] = math.inf
        with self.assertRaises(pr.RecordError):
            pr.record_line(rec)


class Traced(unittest.TestCase):
    def run_(self):
        run = load("emulated_zero3.run.json")
        run["method"] = "traced"
        run["framework"] = "fsdp"
        run["ranks"][0]["traced_peak_bytes_by_kind"] = {"Sharded Param": 100, "OptState": 200}
        return run

    def test_breakdown_kept_and_method_said(self):
        rec = pr.make_record(self.run_())
        self.assertEqual(rec["measured"]["ranks"][0]["traced_peak_bytes_by_kind"],
                         {"Sharded Param": 100, "OptState": 200})
        self.assertTrue(rec["method"].startswith("traced without a GPU: rank 7 of 8"))
        self.assertNotIn("step_time_s", rec["measured"])

    def test_breakdown_must_be_bytes(self):
        run = self.run_()
        run["ranks"][0]["traced_peak_bytes_by_kind"]["Temp"] = 0.5
        with self.assertRaises(pr.RecordError):
            pr.make_record(run)

    def test_breakdown_only_in_traces(self):
        run = self.run_()
        run["method"] = "rank-emulated"
        with self.assertRaises(pr.RecordError):
            pr.make_record(run)


class Append(unittest.TestCase):
    def test_whole_lines(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.jsonl")
            line = pr.record_line(pr.make_record(load("measured_hf.run.json")))
            pr.append_line(path, line)
            pr.append_line(path, line)
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
            self.assertEqual(lines[2], "")
            self.assertEqual(len(lines), 3)
            self.assertEqual(json.loads(lines[0]), json.loads(lines[1]))


if __name__ == "__main__":
    unittest.main()
