"""Tests of calibrate/host/ftrain_records.py (run by tests/calibrate.c).

The flags are checked against an independent source: the argument lines of
tests/gen_ftrain_records.sh, which wrote the committed records in file order,
with every flag it leaves out at ftrain's default as its usage states it
(trainer/cli.c). The runs use a stand-in ftrain that writes a record of the
flags it was given, so resuming, torn lines and a wrong configuration are
exercised without training anything."""
import json
import os
import shlex
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import ftrain_records as fr  # noqa: E402

COMMITTED = os.path.join(ROOT, "calibrate/records/ftrain-cpu.jsonl")
GENERATOR = os.path.join(ROOT, "tests/gen_ftrain_records.sh")
# ftrain's defaults, from its usage text (trainer/cli.c).
DEFAULTS = {"--seed": "1337", "--data": "synthetic", "--init": "seeded", "--seq": "32", "--batch": "2",
            "--grad-accum": "1", "--ranks": "1", "--zero": "0", "--offload": "none",
            "--checkpointing": "none", "--attention": "flash", "--loss": "standard",
            "--precision": "fp32", "--optimizer": "adamw"}

# A stand-in for build/ftrain: writes a window record and a final record whose
# config is read back from its flags, like trainer/record_writer.c. With
# FAKE_IGNORE=--zero it drops that flag (a wrongly mapped run).
FAKE = r'''#!/usr/bin/env python3
import json, os, sys
a = sys.argv[1:]
ign = os.environ.get("FAKE_IGNORE")
def val(f, d):
    return a[a.index(f) + 1] if f in a and f != ign else d
num = lambda f, d: int(val(f, d))
cfg = {"model": val("--model", "tiny-llama"), "layers": num("--layers", 2), "micro_batch": num("--batch", 2),
       "grad_accum": num("--grad-accum", 1), "seq_len": num("--seq", 32), "precision": val("--precision", "fp32"),
       "zero": num("--zero", 0), "offload": val("--offload", "none"), "checkpointing": val("--checkpointing", "none"),
       "attention": val("--attention", "flash"), "loss": val("--loss", "standard"),
       "optimizer": val("--optimizer", "adamw"), "expandable_segments": False, "steps": num("--steps", 10),
       "seed": num("--seed", 1337), "data": val("--data", "synthetic"), "init": val("--init", "seeded")}
n = len(open(os.environ["FAKE_LOG"]).read().split()) if os.path.exists(os.environ["FAKE_LOG"]) else 0
times = [[float(x) for x in t.split(":")] for t in os.environ.get("FAKE_TIMES", "1e-3:2e-4").split(",")]
step, wait = times[n % len(times)]
rec = {"schema": "ftest.record/1", "framework": "ftrain",
       "hardware": {"gpu": "cpu", "gpus_per_node": num("--ranks", 1), "nodes": 1}, "config": cfg,
       "measured": {"oom": False, "steps_done": cfg["steps"], "step_time_s": step, "cpu_wait_s": wait}}
with open(val("--record", None), "a") as f:
    f.write(json.dumps(dict(rec, final=False)) + "\n" + json.dumps(dict(rec, final=True)) + "\n")
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write("run\n")
'''


def generator_lines():
    with open(GENERATOR) as f:
        text = f.read()
    body = text.split("<<'CONFIGS'\n", 1)[1].split("\nCONFIGS\n", 1)[0]
    return [ln for ln in body.split("\n") if ln.strip() and not ln.startswith("#")]


def as_dict(args):
    assert len(args) % 2 == 0, args
    d = dict(zip(args[0::2], args[1::2]))
    assert len(d) == len(args) // 2, "a flag given twice: %r" % args
    return d


class Flags(unittest.TestCase):
    def test_committed_records_map_to_the_generator_lines(self):
        recs = fr.read_records(COMMITTED)
        lines = generator_lines()
        self.assertEqual(len(recs), 61)
        self.assertEqual(len(lines), len(recs))
        for i, (rec, line) in enumerate(zip(recs, lines), 1):
            got = as_dict(fr.flags_of(rec))
            want = dict(DEFAULTS, **as_dict(shlex.split(line)))
            if "--layers" not in want:  # the model's own block count, in the record
                want["--layers"] = got["--layers"]
            self.assertEqual(got, want, "record %d: %s" % (i, line))

    def test_refused(self):
        rec = fr.read_records(COMMITTED)[0]
        bad = [dict(rec, framework="hf"),
               dict(rec, config=dict(rec["config"], model_config={})),
               dict(rec, config=dict(rec["config"], tp=2)),
               dict(rec, config=dict(rec["config"], expandable_segments=True)),
               dict(rec, config={k: v for k, v in rec["config"].items() if k != "zero"}),
               dict(rec, config=dict(rec["config"], zero=None)),
               dict(rec, hardware=dict(rec["hardware"], nodes=2))]
        for b in bad:
            with self.assertRaises(fr.BadRecord):
                fr.flags_of(b)


class Runs(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        self.fake = os.path.join(d, "ftrain")
        with open(self.fake, "w") as f:
            f.write(FAKE)
        os.chmod(self.fake, os.stat(self.fake).st_mode | stat.S_IXUSR)
        self.log = os.path.join(d, "log")
        os.environ["FAKE_LOG"] = self.log
        os.environ.pop("FAKE_IGNORE", None)
        os.environ.pop("FAKE_TIMES", None)
        # Three committed records: two configurations, one of them twice.
        recs = fr.read_records(COMMITTED)
        self.src = os.path.join(d, "src.jsonl")
        self.write_src(recs[0], recs[23], recs[0])
        self.runs_path = os.path.join(d, "runs.jsonl")
        self.out = os.path.join(d, "out.jsonl")

    def write_src(self, *recs):
        with open(self.src, "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")

    def tearDown(self):
        self.dir.cleanup()

    def main(self, *extra):
        devnull = open(os.devnull, "w")
        old, sys.stderr = sys.stderr, devnull
        try:
            return fr.main(["--from", self.src, "--runs", self.runs_path, "--out", self.out, "--ftrain", self.fake,
                            "--steps", "10", "--passes", "2"] + list(extra))
        finally:
            sys.stderr = old
            devnull.close()

    def runs(self):
        if not os.path.exists(self.log):
            return 0
        with open(self.log) as f:
            return len(f.read().split())

    def lines(self, path):
        with open(path) as f:
            return [json.loads(ln) for ln in f]

    def test_all_then_nothing(self):
        self.assertEqual(self.main(), 0)
        got = self.lines(self.runs_path)
        self.assertEqual(len(got), 6)  # 2 passes over 3 records
        self.assertTrue(all(r["final"] and r["config"]["steps"] == 10 for r in got))
        src = fr.read_records(self.src)
        keys = [fr.key_of(r) for r in src]
        self.assertEqual([fr.key_of(r) for r in got], keys + keys)  # pass by pass
        self.assertEqual([fr.key_of(r) for r in self.lines(self.out)], keys)
        self.assertEqual(self.runs(), 6)
        self.assertEqual(self.main(), 0)  # resumed with nothing left: nothing runs
        self.assertEqual(self.runs(), 6)
        self.assertEqual(len(self.lines(self.runs_path)), 6)
        self.assertEqual(self.main("--passes", "3"), 0)  # a third pass: three runs more
        self.assertEqual(self.runs(), 9)

    def test_resume_after_a_torn_line(self):
        self.assertEqual(self.main(), 0)
        with open(self.runs_path) as f:
            lines = f.readlines()
        with open(self.runs_path, "w") as f:  # killed while appending the fourth
            f.write("".join(lines[:3]) + lines[3][:40])
        os.unlink(self.out)
        self.assertEqual(self.main(), 0)
        self.assertEqual(self.runs(), 9)  # the fourth to the sixth again
        self.assertEqual(len(self.lines(self.runs_path)), 6)
        self.assertEqual(len(self.lines(self.out)), 3)

    def test_median_of_step_less_wait(self):
        # One configuration, three passes: step less wait 3.0, 0.5 and 0.1 ms.
        # The median of those is the second run; the median wall step (2.0 ms)
        # would be the third.
        self.write_src(fr.read_records(COMMITTED)[0])
        os.environ["FAKE_TIMES"] = "3e-3:0,1e-3:5e-4,2e-3:1.9e-3"
        self.assertEqual(self.main("--passes", "3"), 0)
        out = self.lines(self.out)
        self.assertEqual(len(out), 1)
        self.assertEqual(out[0]["measured"]["step_time_s"], 1e-3)
        self.assertIn("pass 2 of 3", out[0]["notes"])
        self.assertIn("of 3 runs", out[0]["notes"])
        # Two passes: the lower middle of 3.0 and 0.5, the second.
        os.unlink(self.runs_path)
        os.environ["FAKE_TIMES"] = "3e-3:0,1e-3:5e-4"
        self.assertEqual(self.main("--passes", "2"), 0)
        self.assertEqual(self.lines(self.out)[0]["measured"]["step_time_s"], 1e-3)

    def test_other_steps_do_not_count(self):
        self.assertEqual(self.main("--steps", "4"), 0)
        self.assertEqual(self.main(), 0)
        self.assertEqual(self.runs(), 12)
        self.assertEqual(len(self.lines(self.runs_path)), 12)
        self.assertTrue(all(r["config"]["steps"] == 10 for r in self.lines(self.out)))

    def test_wrong_configuration_stops(self):
        os.environ["FAKE_IGNORE"] = "--zero"  # record 24 is two ranks at ZeRO 3
        self.assertEqual(self.main(), 1)
        self.assertEqual(len(self.lines(self.runs_path)), 1)  # the first (ZeRO 0) kept, the second refused
        self.assertEqual(self.runs(), 2)
        self.assertFalse(os.path.exists(self.out))

    def test_bad_input(self):
        out, self.out = self.out, self.src
        self.assertEqual(self.main(), 2)  # --out is the committed file
        self.out = out
        runs, self.runs_path = self.runs_path, self.out
        self.assertEqual(self.main(), 2)  # --runs is --out
        self.runs_path = runs
        self.assertEqual(self.main("--steps", "1"), 2)
        self.assertEqual(self.main("--passes", "0"), 2)
        with open(self.src, "a") as f:
            f.write("{not json\n")
        self.assertEqual(self.main(), 2)
        self.assertEqual(self.runs(), 0)


class Script(unittest.TestCase):
    def test_missing_ftrain_exits_1(self):
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([sys.executable, os.path.join(HERE, "ftrain_records.py"), "--from", COMMITTED,
                                "--runs", os.path.join(d, "r.jsonl"), "--out", os.path.join(d, "o.jsonl"),
                                "--ftrain", os.path.join(d, "none")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("record 1", r.stderr)


if __name__ == "__main__":
    unittest.main()
