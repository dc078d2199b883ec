"""Tests of the probe's per-step detail (docs/records.md, "Per step"): every
step's time with the warm-up it dropped, DeepSpeed's skipped steps, padding,
the allocator after steps 1, 2 and the last, and --repeat-short. No torch:
CUDA and DeepSpeed are stood in for by plain objects (test_probe_ds.py runs the
skipped-step reading against DeepSpeed 0.19.8's real engine on the CPU).
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
import probe_record as pr  # noqa: E402
import probe_steps as ps  # noqa: E402

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


def stats(n):
    """A memory_stats() dict as torch 2.11 names its keys, with figures from n."""
    return {"allocated_bytes.all.current": 100 * n, "allocated_bytes.all.peak": 150 * n,
            "active_bytes.all.current": 101 * n, "active_bytes.all.peak": 151 * n,
            "reserved_bytes.all.current": 200 * n, "reserved_bytes.all.peak": 250 * n,
            "allocated_bytes.small_pool.current": 7, "num_alloc_retries": n - 1,
            "num_device_alloc": 10 * n, "num_device_free": n // 2}


class FakeMask:
    """A 0-d device tensor's stand-in: (mask == 0).any() read by bool() at the end."""

    def __init__(self, values, reads):
        self.values, self.reads = values, reads

    def __eq__(self, other):
        return FakeMask([v == other for v in self.values], self.reads)

    def any(self):
        return FakeMask([any(self.values)], self.reads)

    def __bool__(self):
        self.reads.append(1)
        return bool(self.values[0])


class StepLogTests(unittest.TestCase):
    def test_sampled_steps(self):
        self.assertEqual(ps.sampled_steps(8), [1, 2, 8])
        self.assertEqual(ps.sampled_steps(2), [1, 2])
        self.assertEqual(ps.sampled_steps(1), [1])

    def test_memory_after_steps_one_two_and_last(self):
        calls = []

        def memory_stats():
            calls.append(1)
            return stats(len(calls))
        log = ps.StepLog(5, memory_stats)
        for _ in range(5):
            log.begin()
            log.end()
        f = log.fields()
        # Read three times (after steps 1, 2, 5), each reading one dict.
        self.assertEqual(len(calls), 3)
        self.assertEqual([e["step"] for e in f["memory_by_step"]], [1, 2, 5])
        last = f["memory_by_step"][2]  # the third read: n = 3
        self.assertEqual(last, {"step": 5, "allocated_bytes": 300, "active_bytes": 303,
                                "reserved_bytes": 600, "peak_allocated_bytes": 450,
                                "peak_active_bytes": 453, "peak_reserved_bytes": 750,
                                "num_alloc_retries": 2, "num_device_alloc": 30,
                                "num_device_free": 1})
        self.assertNotIn("step_overflow", f)  # no loss scaler watched

    def test_a_torch_without_a_counter_leaves_it_out(self):
        s = stats(1)
        del s["num_device_alloc"]
        self.assertNotIn("num_device_alloc", ps.memory_entry(1, s))

    def test_overflow_per_step_from_the_skipped_count(self):
        skipped = [0]
        log = ps.StepLog(4, None, lambda: skipped[0])
        for overflowed in (True, True, False, True):
            log.begin()
            skipped[0] += overflowed  # DeepSpeed adds one when it skips the step
            log.end()
        self.assertEqual(log.fields()["step_overflow"], [True, True, False, True])
        self.assertNotIn("memory_by_step", log.fields())

    def test_padding_per_step_read_at_the_end(self):
        reads = []
        log = ps.StepLog(3)
        hook = ps.mask_hook(log)
        log.begin()  # step 1: two micro-batches, the second padded
        hook(None, (), {"attention_mask": FakeMask([1, 1, 1], reads)})
        hook(None, (), {"attention_mask": FakeMask([1, 1, 0], reads)})
        log.end()
        log.begin()  # step 2: no mask at all
        hook(None, (), {"input_ids": 1})
        log.end()
        log.begin()  # step 3: full mask
        hook(None, (), {"attention_mask": FakeMask([1, 1], reads)})
        log.end()
        self.assertEqual(reads, [])  # nothing read inside the steps
        self.assertEqual(log.fields()["step_padded"], [True, False, False])

    @unittest.skipUnless(HAVE_TORCH, "needs torch")
    def test_padding_from_real_masks(self):
        import torch
        log = ps.StepLog(2)
        hook = ps.mask_hook(log)
        for mask in ([[1, 1, 0], [1, 1, 1]], [[1, 1, 1], [1, 1, 1]]):
            log.begin()
            hook(None, (), {"attention_mask": torch.tensor(mask)})
            log.end()
        self.assertEqual(log.step_padded(), [True, False])

    def test_ds_skipped_steps_reads_the_engine(self):
        trainer = types.SimpleNamespace(model_wrapped=types.SimpleNamespace(skipped_steps=3))
        self.assertEqual(ps.ds_skipped_steps(trainer)(), 3)
        self.assertEqual(ps.ds_skipped_steps(types.SimpleNamespace(model_wrapped=None))(), 0)


STACK = {k: None for k in pr.STACK_KEYS}
RANKS = [{"rank": 0, "peak_allocated_bytes": 1000}]
TIMES = [0.9, 0.5, 0.3, 0.1, 0.2, 0.4, 0.2, 0.3]  # steps 4-8 sorted: 0.1 0.2 0.2 0.3 0.4


class MakeLine(unittest.TestCase):
    def line(self, argv, times=TIMES, steps=None, ranks=None, **kw):
        a = fp.parse_args(["--mode", "hf", "--model", "tiny-llama"] + argv)
        return json.loads(fp.make_line(a, STACK, kw.pop("oom", False), times,
                                       ranks or [dict(r) for r in RANKS], steps=steps, **kw))

    def test_every_step_and_the_warmup(self):
        m = self.line([])["measured"]
        self.assertEqual(m["step_times_s"], TIMES)
        self.assertEqual(m["warmup_steps"], 3)  # the probe's default --warmup
        self.assertEqual(m["step_time_s"], 0.2)  # median of steps 4-8, by hand above

    def test_no_step_times_where_no_step_time(self):
        for argv in (["--world", "8", "--rank", "7"], ["--memory-history", "10"]):
            m = self.line(argv)["measured"]
            self.assertNotIn("step_times_s", m)
            self.assertNotIn("warmup_steps", m)
        m = self.line([], times=[0.5], oom=True)["measured"]
        self.assertNotIn("step_times_s", m)

    def test_step_flags_and_memory_pass_through(self):
        ranks = [{"rank": 0, "peak_allocated_bytes": 1000,
                  "memory_by_step": [{"step": 1, "reserved_bytes": 2 << 20}]}]
        rec = self.line(["--world", "8", "--rank", "7"], ranks=ranks,
                        steps={"step_overflow": [True, False], "step_padded": [False, False]})
        self.assertEqual(rec["measured"]["step_overflow"], [True, False])
        self.assertEqual(rec["measured"]["step_padded"], [False, False])
        self.assertEqual(rec["measured"]["ranks"][0]["memory_by_step"],
                         [{"step": 1, "reserved_bytes": 2 << 20}])

    def test_step_fields_move_memory_into_the_rank(self):
        log = ps.StepLog(2, lambda: stats(1))
        for _ in range(2):
            log.begin()
            log.note_mask(None)
            log.end()
        ranks = [{"rank": 0, "peak_allocated_bytes": 1}]
        f = fp.step_fields({"step_log": log}, ranks)
        self.assertEqual(f, {"step_padded": [False, False]})
        self.assertEqual([e["step"] for e in ranks[0]["memory_by_step"]], [1, 2])
        self.assertEqual(fp.step_fields({}, ranks), {})


def load(name):
    with open(os.path.join(HERE, "fixtures", name), encoding="utf-8") as f:
        return json.load(f)


class RecordChecks(unittest.TestCase):
    """make_record on the per-step keys: the fixture by hand, and refusals."""

    def setUp(self):
        self.run = load("measured_ds_fp16_steps.run.json")

    def refuse(self, words):
        with self.assertRaises(pr.RecordError) as ctx:
            pr.make_record(self.run)
        self.assertIn(words, str(ctx.exception))

    def test_fixture(self):
        # steps 3-5 after 2 warm-up steps: 0.25 0.26 0.25, median 0.25 s; it/s 4,
        # 1024 tokens / 0.25 s = 4096 tokens/s.
        self.assertEqual(pr.make_record(self.run), load("measured_ds_fp16_steps.expected.json"))

    def test_median_must_match(self):
        self.run["step_time_s"] = 0.26
        self.refuse("not the median of step_times_s")

    def test_warmup_in_range(self):
        self.run["warmup_steps"] = 5
        self.refuse("warmup_steps must be in [0, 5)")
        del self.run["step_times_s"]
        self.refuse("warmup_steps needs step_times_s")

    def test_step_times_positive(self):
        self.run["step_times_s"][0] = 0.0
        self.refuse("positive and finite")

    def test_emulated_has_no_step_times(self):
        run = load("emulated_zero3.run.json")
        run["step_times_s"] = [0.1, 0.2]
        self.run = run
        self.refuse("carries no step time")

    def test_flags_are_booleans(self):
        self.run["step_overflow"] = [1, 0, 0, 0, 0]
        self.refuse("list of true/false")

    def test_memory_steps_increase_and_are_bytes(self):
        mem = self.run["ranks"][0]["memory_by_step"]
        mem[1]["step"] = 1
        self.refuse("not a step after 1")
        mem[1]["step"] = 2
        mem[1]["reserved_bytes"] = 1.5
        self.refuse("whole number of bytes")
        mem[1]["reserved_bytes"] = 1
        mem[1]["cached_bytes"] = 1
        self.refuse("unknown cached_bytes")

    def test_repeat_names_no_point(self):
        self.run["repeat_of"] = self.run["point"]
        self.refuse("not a point")
        del self.run["point"]
        self.assertEqual(pr.make_record(self.run)["repeat_of"],
                         "probe/ds-w1/deepspeed/qwen2.5-0.5b/s1024/z2/fp16")


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(x) for x in f]


class Repeats(unittest.TestCase):
    """--repeat-short: the short timed points again at the process's end,
    recorded with repeat_of; run_one and the allocator stood in for."""

    def run_jobs(self, repeat_short, jobs, world=1):
        ran = []

        def run_one(a, hf_cfg, box):
            ran.append((a.mode, a.seq, a.batch))
            return False, [0.1 * len(ran)] * a.steps, [dict(RANKS[0])], {"step_padded": []}
        with tempfile.TemporaryDirectory() as d:
            proc = fp.parse_args(["--jobs", "unused", "--record", os.path.join(d, "p.jsonl"),
                                  "--events", os.path.join(d, "e.jsonl"), "--world", str(world),
                                  "--rank", "0", "--repeat-short", str(repeat_short)])
            saved = (fp.run_one, fp.allocated_now)
            fp.run_one, fp.allocated_now = run_one, lambda: 0
            try:
                rc = fp.run_job_list(proc, jobs, STACK)
            finally:
                fp.run_one, fp.allocated_now = saved
            recs, events = lines(os.path.join(d, "p.jsonl")), lines(os.path.join(d, "e.jsonl"))
        return rc, ran, recs, events

    JOBS = [{"id": "a", "args": ["--mode", "hf", "--seq", "512"]},
            {"id": "b", "args": ["--mode", "hf", "--seq", "4096"]},
            {"id": "c", "args": ["--mode", "hf", "--seq", "512", "--batch", "2"]},
            {"id": "d", "args": ["--mode", "hf", "--seq", "256", "--memory-history", "5"]}]

    def test_off_by_default(self):
        rc, ran, recs, _ = self.run_jobs(0, self.JOBS)
        self.assertEqual((rc, len(ran)), (0, 4))
        self.assertFalse(any("repeat_of" in r for r in recs))

    def test_short_points_repeat_last_with_repeat_of(self):
        rc, ran, recs, events = self.run_jobs(1024, self.JOBS)
        self.assertEqual(rc, 0)
        # a (512) and c (512 x 2) repeat, in order; b is long, d's history slows it.
        self.assertEqual(ran[4:], [("hf", 512, 1), ("hf", 512, 2)])
        self.assertEqual([r.get("point") for r in recs], ["a", "b", "c", "d", None, None])
        self.assertEqual([r.get("repeat_of") for r in recs[4:]], ["a", "c"])
        self.assertEqual(recs[4]["measured"]["step_times_s"], [0.5] * 8)  # its own timing
        self.assertIn("repeat of a", recs[4]["notes"])
        self.assertEqual({e["point"] for e in events[-4:]}, {"a#repeat", "c#repeat"})

    def test_emulated_ranks_do_not_repeat(self):
        _, ran, _, _ = self.run_jobs(1024, self.JOBS[:1], world=8)
        self.assertEqual(len(ran), 1)

    def test_negative_is_refused(self):
        with self.assertRaises(SystemExit):
            fp.parse_args(["--mode", "hf", "--repeat-short", "-1"])


if __name__ == "__main__":
    unittest.main()
