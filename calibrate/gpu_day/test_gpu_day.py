#!/usr/bin/env python3
"""make gpu-day DRY_RUN=1: the GPU day's driver on the fake device
(fake_device.py), so that the day itself cannot fail on plumbing.

  * the plan: unique ids, at least 150 probe points, the tier order, every
    simulated call under the per-call limit;
  * a day killed mid-point (the driver's process group gets SIGKILL inside a
    probe point) and resumed until done: the killed point is retried, a point
    whose process crashes is retried, one that raises is retried first in a
    fresh process and then given up, a hung one is stopped by the watchdog, an
    out-of-memory run is a record; nothing is lost or recorded twice;
  * every record read by `ftest check` and `ftest fit` as they are;
  * the output folder within the device tool's limits (8 files, 16 MiB each);
  * an over-budget stop that spends no more on a second call, and resumes
    when a later call brings more budget.
Needs build/ftest and build/ftrain (the fake ftrain runs the real one on the
CPU). Run from the repository root; about half a minute."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import outputs  # noqa: E402
import plan as pl  # noqa: E402
import state as st  # noqa: E402

SCALE = "0.01"
THIN = "6"
DRIVER = [sys.executable, "-B", os.path.join(HERE, "gpu_day.py"), "--dry-run", "--thin", THIN]


def thinned_plan():
    sys.argv = ["gpu_day.py", "--plan", "--thin", THIN]
    import gpu_day
    return gpu_day.the_plan(gpu_day.parse_args(["--plan", "--thin", THIN]))


def run_driver(out, *args, env=None, wait=True):
    e = dict(os.environ, GPU_DAY_TIME_SCALE=SCALE, **(env or {}))
    cmd = DRIVER + ["--out", out, "--work", out + "-work"] + list(args)
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    r = subprocess.run(cmd, cwd=ROOT, env=e, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"driver exit {r.returncode}: {r.stderr[-2000:]}")
    return r


def events(out):
    return st.read_jsonl(os.path.join(out, "state.jsonl"))[0]


def manifest(out):
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


class Plan(unittest.TestCase):
    def test_plan_shape(self):
        plan = pl.default_plan()
        ids = [p["id"] for p in plan]
        self.assertEqual(len(ids), len(set(ids)))
        probes = [p for p in plan if p["kind"] == "probe"]
        self.assertGreaterEqual(len(probes), 150)
        self.assertGreaterEqual(sum(1 for p in plan if p["kind"] == "ftrain"), 20)
        self.assertEqual(plan[0]["id"], "check/gpu-parity")
        tiers = [p.get("tier", 1) for p in plan]
        self.assertEqual(tiers, sorted(tiers))
        for p in plan:
            self.assertGreater(p["est_s"], 0, p["id"])
            args = p.get("args") or []
            if "--model" in args and "--seq" in args:  # ftest refuses a record past the model's positions
                model = pl.load_model(args[args.index("--model") + 1])
                self.assertLessEqual(int(args[args.index("--seq") + 1]), model["max_position_embeddings"], p["id"])
        # Both emulated ranks and both ZeRO-3 init paths are there.
        for needle in ("ds-w8-r0", "ds-w8-r7", "no-zero-init", "fsdp2", "qlora", "quant=int8", "adam8bit"):
            self.assertTrue(any(needle in i for i in ids), needle)

    def test_repeats_are_the_probes(self):
        # The driver keeps room for a repeat (gpu_day.repeat_cost) exactly where
        # ftest_probe.py --repeat-short runs one (ftest_probe.repeatable).
        sys.path.insert(0, os.path.join(ROOT, "calibrate", "probes"))
        import ftest_probe as fp
        n = 0
        for p in pl.default_plan():
            if p["kind"] != "probe":
                continue
            proc = fp.parse_args(["--jobs", "x", "--repeat-short", "1024", "--world", str(p["world"]),
                                  "--rank", str(p["rank"])])
            a = fp.job_args(proc, {"id": p["id"], "args": p["args"]})
            self.assertEqual(pl.repeats(p, 1024), fp.repeatable(proc, a), p["id"])
            n += pl.repeats(p, 1024)
        self.assertEqual(n, 31)  # docs/gpu-day.md "Per step": 25 tier-1 and 6 tier-2 points
        self.assertFalse(any(pl.repeats(p, 0) for p in pl.default_plan()))

    def test_an_environment_is_a_groups_own(self):
        # A probe process reads PYTORCH_CUDA_ALLOC_CONF once, at its first CUDA
        # allocation, and runs a chunk of one group's points: a group whose
        # points asked for different environments would measure one of them
        # under the other's allocator.
        envs = {}
        for p in pl.default_plan():
            if p["kind"] == "probe":
                envs.setdefault(p["group"], set()).add(json.dumps(p.get("env", {}), sort_keys=True))
        self.assertTrue(all(len(e) == 1 for e in envs.values()), envs)
        es = [g for g, e in envs.items() if "expandable_segments:True" in next(iter(e))]
        self.assertEqual(sorted(es), ["ds-w8-r0-es", "ds-w8-r0-es-mh", "hf-w1-es"])

    def test_memory_history_points(self):
        # issue 18's remaining reserved misses: the five shapes, tier 1, with
        # --memory-history, in groups that hold nothing else (the recording
        # slows every step of a process it is on in)
        plan = pl.default_plan()
        mh = [p for p in plan if "--memory-history" in p.get("args", [])]
        self.assertEqual(sorted(p["id"] for p in mh), sorted([
            "probe/fsdp-w8-r0-mh/fsdp/llama3-8b-L4/s1024/b1/zero=3/memory-history",
            "probe/fsdp-w8-r0-mh/fsdp/llama3-8b-L4/s2048/b1/zero=3/memory-history",
            "probe/ds-w8-r0-mh/deepspeed/llama3-8b-L4/s2048/b1/zero=3/memory-history",
            "probe/ds-w8-r0-es-mh/deepspeed/llama3-8b-L4/s2048/b1/zero=3/expandable-segments/memory-history",
            "probe/peft-w1-mh/lora/qwen2.5-0.5b/s2048/b1/memory-history"]))
        self.assertTrue(all(p["tier"] == 1 and p["job"] == "probe-memhist" for p in mh))
        groups = {p["group"] for p in mh}
        self.assertEqual({p["id"] for p in plan if p.get("group") in groups}, {p["id"] for p in mh})
        for p in mh:
            self.assertEqual((p["world"], p["rank"]), (1, 0) if "peft" in p["group"] else (8, 0))
        # cheap: within the default budget, and with their four process
        # starts under a fifth of its 12 minutes
        where, _ = pl.simulate(plan, 12 * 60, 9.5 * 60)
        self.assertTrue(all(where[p["id"]] for p in mh))
        self.assertLess(sum(p["est_s"] + pl.start_cost(p) for p in mh), 12 * 60 / 5)

    def test_packing_keeps_each_call_under_its_limit(self):
        plan = pl.default_plan()
        where, calls = pl.simulate(plan, 12 * 60, 9.5 * 60)
        self.assertTrue(all(c <= 9.5 * 60 for c in calls), calls)
        self.assertEqual(len(calls), 2)
        self.assertEqual(where["check/gpu-parity"], 1)
        # Over the budget: what does not fit is never given a call.
        over = [i for i, c in where.items() if c == 0]
        self.assertGreater(len(over), 0)
        self.assertLessEqual(sum(calls), 12 * 60)

    def test_plan_command(self):
        r = subprocess.run([sys.executable, "-B", os.path.join(HERE, "gpu_day.py"), "--plan"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("check/gpu-parity", r.stdout)
        self.assertIn("fit the budget", r.stdout)


class DayLeads(unittest.TestCase):
    """The plan's leads against what the first GPU day measured
    (calibrate/gpu-days/2026-11-26-h200/state.jsonl, the driver's own log of
    each point's elapsed seconds, read here independently of plan.py)."""
    DAY = os.path.join(ROOT, "calibrate", "gpu-days", "2026-11-26-h200", "state.jsonl")

    def day(self):
        evs, _ = st.read_jsonl(self.DAY)
        return evs

    def test_probe_groups_and_checks_match_the_day(self):
        plan = {p["id"]: p for p in pl.default_plan()}
        lead, took = {}, {}
        for e in self.day():
            if e.get("event") != "point-end" or e.get("outcome") != "ok" or e["point"] not in plan:
                continue
            p = plan[e["point"]]
            if p["kind"] == "check" and "learning/llama3.2-1b" in p["id"]:
                continue
            key = p.get("group") or p["job"]
            lead[key] = lead.get(key, 0.0) + p["est_s"]
            took[key] = took.get(key, 0.0) + e["elapsed_s"]
        self.assertGreaterEqual(len(lead), 7)
        for key in lead:  # the leads carry 2 decimals per point
            self.assertAlmostEqual(lead[key] / took[key], 1.0, delta=0.02, msg=key)

    def test_ftrain_leads_match_the_days_records(self):
        # Each ftrain point that ran: its lead against the driver's elapsed
        # seconds, within a tenth (the lead's start and init are the day's
        # medians, its step the record's own).
        plan = {p["id"]: p for p in pl.default_plan()}
        ran = [e for e in self.day() if e.get("event") == "point-end" and e.get("outcome") == "ok"
               and e["point"].startswith("ftrain/")]
        self.assertEqual(len(ran), 9)
        for e in ran:
            self.assertAlmostEqual(plan[e["point"]]["est_s"] / e["elapsed_s"], 1.0, delta=0.1, msg=e["point"])

    def test_a_cut_point_is_led_above_what_it_took(self):
        # bench/ftrain was cut at the call's deadline after 25.6 s against a
        # 10 s lead: whatever it takes, it takes more than that.
        # (A cut point that ran later, as ftrain's first record did after its
        # init was fixed, says nothing of its lead.)
        plan = {p["id"]: p for p in pl.default_plan()}
        ended = {e["point"] for e in self.day() if e.get("event") == "point-end" and e.get("final")}
        cut = [e for e in self.day() if e.get("event") == "point-end" and e.get("outcome") == "cut"
               and e["point"] in plan and plan[e["point"]]["kind"] != "probe" and e["point"] not in ended]
        self.assertTrue(any(e["point"] == "bench/ftrain/llama3.2-1b/s2048/b1" for e in cut))
        for e in cut:
            self.assertGreater(plan[e["point"]]["est_s"], e["elapsed_s"], e["point"])

    def test_process_starts_match_the_day(self):
        # From a point's end to the next fresh process's first point-start.
        plan = {p["id"]: p for p in pl.default_plan()}
        gaps, last = {}, None
        for e in self.day():
            if e.get("event") == "call-start":
                last = None
            elif e.get("event") == "point-end":
                last = e["at"]
            elif e.get("event") == "point-start" and e.get("first_in_process") and last is not None:
                p = plan.get(e["point"])
                if p and p["kind"] == "probe":
                    gaps.setdefault(pl.GROUP_FAMILY[p["group"]], []).append(e["at"] - last)
        for fam, g in gaps.items():
            g.sort()
            median = (g[len(g) // 2] + g[(len(g) - 1) // 2]) / 2
            self.assertAlmostEqual(pl.PROCESS_START_S[fam], median, delta=0.3, msg=fam)


class FtrainArgs(unittest.TestCase):
    """Every ftrain point's arguments, as the driver passes them
    (checks.ftrain_run: --device cuda --quiet --record FILE, then the
    point's), accepted by build/ftrain: with the record file /dev/full, ftrain
    parses and validates everything, then refuses the file before it trains
    or writes anything (trainer/main.c), so that refusal, and no other, says
    the arguments hold. 2026-11-26: `--offload optimizer` without `--zero`
    was refused on the GPU."""

    def test_ftrain_accepts_every_points_arguments(self):
        ftrain = os.path.join(ROOT, "build", "ftrain")
        pts = [p for p in pl.default_plan() if p["kind"] == "ftrain"]
        self.assertGreaterEqual(len(pts), 20)
        for p in pts:
            r = subprocess.run([ftrain, "--device", "cuda", "--quiet", "--record", "/dev/full"] + p["args"],
                               cwd=ROOT, capture_output=True, text=True, timeout=60)
            self.assertEqual((r.returncode, r.stderr.strip()),
                             (2, "ftrain: record file /dev/full is not a regular file"), p["id"])

    def test_a_refused_argument_is_seen(self):
        ftrain = os.path.join(ROOT, "build", "ftrain")
        r = subprocess.run([ftrain, "--device", "cuda", "--quiet", "--record", "/dev/full", "--model", "llama3.2-1b",
                            "--layers", "2", "--offload", "optimizer"], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--offload optimizer needs --zero", r.stderr)


class Learning(unittest.TestCase):
    """The learning checks' targets (checks.learning_target), from the
    synthetic task's arithmetic written out here: V pairs, steps x batch x
    seq predictions per run."""

    def points(self):
        return [p for p in pl.default_plan() if p.get("run") == "learning"]

    def test_every_learning_point_can_show_learning(self):
        import checks
        pts = self.points()
        self.assertEqual(len(pts), 2)
        for p in pts:
            why = checks.learning_target(p)
            # tiny-llama: 50 steps x 2 x 32 tokens over 64 pairs = 50 exposures each
            self.assertGreaterEqual(why["exposures_per_pair"], 50.0, p["id"])
            self.assertFalse(why["refused"], p["id"])

    def test_block_point_targets_half_the_uniform_loss(self):
        import checks
        p = [q for q in self.points() if "tiny" not in q["id"]][0]
        why = checks.learning_target(p)
        # 60 x 8 x 256 = 122,880 predictions over a 2,048-token vocabulary: 60 each;
        # half of ln 2048 = 3.8123.
        self.assertAlmostEqual(why["exposures_per_pair"], 60.0)
        self.assertAlmostEqual(why["loss_target"], 0.5 * 7.6246, places=3)
        self.assertIn("llama3.2-1b", p["shaped"]["base"])
        self.assertIn("--layers", p["args"])

    def test_tail_median_holds_through_spikes(self):
        # Twelve steps at 0.2 but steps 9 and 12 (the last) at 4.8 and 5.9, as
        # the CPU run of the 1B blocks spiked: the last ten sorted are eight
        # 0.2s and the two spikes, so their median is 0.2.
        import checks
        path = os.path.join(tempfile.mkdtemp(), "learning.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for k in range(1, 13):
                loss = {9: 4.8, 12: 5.9}.get(k, 0.2)
                f.write(json.dumps({"final": False, "measured": {"steps_done": k, "loss_last": loss}}) + "\n")
            f.write(json.dumps({"final": True, "measured": {"steps_done": 12, "loss_last": 5.9}}) + "\n")
        self.assertAlmostEqual(checks.learning_tail(path), 0.2)
        shutil.rmtree(os.path.dirname(path))

    def test_the_gpu_days_settings_are_refused(self):
        # 2026-11-26: llama3.2-1b at its 128,256 tokens, 60 x 8 x 256:
        # 122,880 / 128,256 = 0.958 exposures per pair; it ended at 11.78 =
        # ln 128,256 (11.762) + 0.02, short of "half the first loss" (6.09).
        import checks
        p = {"id": "check/learning/llama3.2-1b-L2", "run": "learning",
             "args": ["--model", "llama3.2-1b", "--layers", "2", "--seq", "256", "--batch", "8",
                      "--steps", "60", "--lr", "1e-3", "--precision", "bf16-mixed"]}
        why = checks.learning_target(p)
        self.assertAlmostEqual(why["exposures_per_pair"], 0.958, places=3)
        self.assertAlmostEqual(why["loss_uniform"], 11.7617, places=3)
        self.assertTrue(why["refused"])


class GradCompare(unittest.TestCase):
    def write(self, path, tensors):
        """A safetensors file of F32 tensors, as ftrain --dump-grads writes."""
        import struct
        header, blob = {}, b""
        for name, vals in tensors.items():
            header[name] = {"dtype": "F32", "shape": [len(vals)], "data_offsets": [len(blob), len(blob) + 4 * len(vals)]}
            blob += struct.pack(f"<{len(vals)}f", *vals)
        h = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + blob)

    def test_worst_tensor(self):
        import checks
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a"), os.path.join(d, "b")
            # w: |(3,4) - (3,4.5)| / |(3,4.5)| = 0.5 / sqrt(29.25); v equal.
            self.write(a, {"w": [3.0, 4.0], "v": [1.0, 2.0]})
            self.write(b, {"w": [3.0, 4.5], "v": [1.0, 2.0]})
            r = checks.compare_grads(a, b)
            self.assertEqual(r["worst_tensor"], "w")
            self.assertAlmostEqual(r["worst_rel_l2"], 0.5 / 29.25 ** 0.5, places=7)
            self.write(b, {"w": [3.0, 4.0]})
            self.assertEqual(checks.compare_grads(a, b)["mismatch"], ["v"])


class Day(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="gpu-day-test-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def faults(self, plan):
        """Fault points in jobs after probe-hf (the kill lands in probe-hf)."""
        ds8 = [p["id"] for p in plan if p.get("group") == "ds-w8-r7"]
        fs8 = [p["id"] for p in plan if p.get("group") == "fsdp-w8-r0"]
        hf = [p["id"] for p in plan if p.get("group") == "hf-w1"]
        return {"GPU_DAY_FAKE_SLOW": hf[2], "GPU_DAY_FAKE_CRASH": ds8[0], "GPU_DAY_FAKE_ERROR": ds8[1],
                "GPU_DAY_FAKE_HANG": fs8[0], "GPU_DAY_FAKE_OOM": fs8[1]}

    def kill_inside(self, out, env, point):
        """Starts the driver and SIGKILLs its process group inside `point`."""
        proc = run_driver(out, "--budget-min", "60", env=env, wait=False)
        t0 = time.time()
        while time.time() - t0 < 60:
            starts = [e for e in events(out) if e.get("event") == "point-start" and e.get("point") == point]
            if starts:
                time.sleep(0.3)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return
            if proc.poll() is not None:
                self.fail("the driver ended before the point to kill it in")
            time.sleep(0.02)
        self.fail("the point to kill the driver in never started")

    def test_kill_resume_faults_limits_validation(self):
        out = os.path.join(self.tmp, "day")
        plan = thinned_plan()
        env = self.faults(plan)
        slow = env["GPU_DAY_FAKE_SLOW"]
        self.kill_inside(out, env, slow)
        ev = events(out)
        self.assertFalse(any(e.get("event") == "point-end" and e.get("point") == slow for e in ev),
                         "the killed point has an end")
        for _ in range(8):  # resume until done
            run_driver(out, "--budget-min", "60", env=env)
            if manifest(out)["status"] == "complete":
                break
        m = manifest(out)
        self.assertEqual(m["status"], "complete", m["next"])
        pts = {p["id"]: p for p in m["points"]}
        self.assertEqual((pts[slow]["outcome"], pts[slow]["attempts"]), ("ok", 2))
        crash = pts[env["GPU_DAY_FAKE_CRASH"]]
        self.assertEqual((crash["outcome"], crash["attempts"]), ("ok", 2))
        err = pts[env["GPU_DAY_FAKE_ERROR"]]
        self.assertEqual((err["outcome"], err["attempts"], err["status"]), ("error", 2, "final"))
        self.assertEqual(pts[env["GPU_DAY_FAKE_HANG"]]["outcome"], "timeout")
        self.assertEqual(pts[env["GPU_DAY_FAKE_OOM"]]["outcome"], "oom")
        self.assertTrue(all(p["status"] == "final" for p in m["points"]))
        self.check_records(out, plan, env)
        self.check_limits(out, m)

    def check_records(self, out, plan, env):
        """Each point recorded once; every record readable by ftest."""
        seen = {}
        for name in ("probe.jsonl", "ftrain-gpu.jsonl", "results.jsonl"):
            recs, bad = st.read_jsonl(os.path.join(out, name))
            self.assertEqual(bad, 0, name)
            for r in recs:
                if "point" in r:
                    self.assertNotIn(r["point"], seen, f"{r['point']} recorded twice")
                    seen[r["point"]] = name
                if "point" in r and name == "probe.jsonl" and not r.get("oom"):
                    # the plan's environment reached the probe process
                    self.assertEqual(r["config"].get("expandable_segments"),
                                     r["point"].endswith("/expandable-segments"), r["point"])
        ok = {p["id"] for p in plan} - {env["GPU_DAY_FAKE_ERROR"], env["GPU_DAY_FAKE_HANG"]}
        self.assertEqual(set(seen), ok)
        files = [os.path.join(out, n) for n in ("probe.jsonl", "ftrain-gpu.jsonl")]
        ftest = os.path.join(ROOT, "build", "ftest")
        r = subprocess.run([ftest, "check", "--quiet"] + files, capture_output=True, text=True, timeout=60)
        self.assertIn(r.returncode, (0, 1), r.stderr[-1000:])
        self.assertIn(" 0 unreadable", r.stdout)
        fit = subprocess.run([ftest, "fit"] + files + ["--out", os.path.join(self.tmp, "fit")],
                             capture_output=True, text=True, timeout=60)
        self.assertNotIn("ERROR", fit.stdout + fit.stderr)
        self.assertNotIn("unreadable", fit.stdout + fit.stderr)
        results, _ = st.read_jsonl(os.path.join(out, "results.jsonl"))
        val = [r for r in results if "validation" in r]
        self.assertTrue(val and all(v["readable"] for v in val), val[-1:])

    def check_limits(self, out, m):
        ok, problems, files = outputs.check_limits(out)
        self.assertTrue(ok, problems)
        self.assertLessEqual(len(files), 8)
        self.assertTrue(set(f["name"] for f in files) <= set(outputs.OUT_FILES))
        self.assertTrue(m["limits"]["ok"])
        for key in ("budget", "calls", "environment", "jobs", "points", "skipped", "files", "next"):
            self.assertIn(key, m)
        self.assertGreaterEqual(len(m["calls"]), 2)
        for p in m["points"]:
            self.assertIn("est_s", p)
            self.assertIn("elapsed_s", p)

    def test_a_later_call_is_not_broken_by_an_earlier_calls_errors(self):
        # 2026-11-26: ds-w8-r7 failed twice in call 1 (a probe fault fixed
        # before call 5); in calls 5-7 each probe process ran one point and
        # stopped for a fresh one (memory left allocated), and the group was
        # then skipped as "two points failed" under call 1's message.
        out = os.path.join(self.tmp, "later")
        g = [p["id"] for p in pl.default_plan() if p.get("group") == "ds-w8-r7"]
        env = {"GPU_DAY_FAKE_LEAK": "ds-w8-r7"}
        only = ["--budget-min", "60", "--only", "probe/ds-w8-r7", "--thin", "1"]
        run_driver(out, *only, env=dict(env, GPU_DAY_FAKE_ERROR=",".join(g[:2])))
        pts = {p["id"]: p for p in manifest(out)["points"]}
        self.assertEqual([pts[i]["outcome"] for i in g[:2]], ["error", "error"])
        self.assertTrue(all(pts[i]["outcome"] == "skipped" for i in g[2:]))
        for _ in range(4):  # the fixed probe, one point per process still: as many calls as it takes
            run_driver(out, *only, env=env)
            if manifest(out)["status"] == "complete":
                break
        pts = {p["id"]: p for p in manifest(out)["points"]}
        self.assertEqual([i for i in g[2:] if pts[i]["outcome"] != "ok"], [])
        late = [e for e in events(out) if e.get("event") == "defer" and e.get("call", 0) >= 2
                and e.get("reason", "").startswith("two points failed")]
        self.assertEqual(late, [])

    def test_memory_history_comes_back(self):
        # the fake probe writes what ftest_probe.write_memory_history does:
        # one summary line per --memory-history point beside probe.jsonl
        out = os.path.join(self.tmp, "memhist")
        run_driver(out, "--budget-min", "60", "--only", "memory-history", "--thin", "1")
        m = manifest(out)
        self.assertEqual(m["status"], "complete", m["next"])
        lines, bad = st.read_jsonl(os.path.join(out, "memory-history.jsonl"))
        self.assertEqual(bad, 0)
        self.assertEqual(sorted(x["point"] for x in lines), sorted(p["id"] for p in m["points"]))
        self.assertEqual(m["records"]["memory-history.jsonl"]["lines"], 5)
        recs, _ = st.read_jsonl(os.path.join(out, "probe.jsonl"))
        peak = {r["point"]: r["measured"]["ranks"][0]["peak_allocated_bytes"] for r in recs}
        for x in lines:
            self.assertEqual(x["at"], "reserved peak")
            active = sum(b[0] for s in x["segments"] for b in s["blocks"] if b[2] == "a")
            self.assertEqual(active, peak[x["point"]])  # the fake's peak: both halves live
            self.assertEqual(x["trace_counts"]["segment_alloc"], 2)
        for r in recs:
            self.assertGreater(r["measured"]["ranks"][0]["device_total_at_start_bytes"],
                               r["measured"]["ranks"][0]["device_free_at_start_bytes"])
        ftest = os.path.join(ROOT, "build", "ftest")
        r = subprocess.run([ftest, "check", "--quiet", os.path.join(out, "probe.jsonl")],
                           capture_output=True, text=True, timeout=60)
        self.assertIn(" 0 unreadable", r.stdout, r.stderr[-1000:])
        ok, problems, _ = outputs.check_limits(out)
        self.assertTrue(ok, problems)

    def test_step_keys_and_repeats_come_back(self):
        # docs/records.md "Per step": every record of the fake probe carries the
        # per-step keys; with --repeat-short the short one-GPU points come back a
        # second time as repeat_of records, which end no point and read in ftest.
        out = os.path.join(self.tmp, "repeat")
        run_driver(out, "--budget-min", "60", "--only", "probe/hf-w1/", "--thin", "4",
                   "--repeat-short", "1024")
        m = manifest(out)
        self.assertEqual(m["status"], "complete", m["next"])
        recs, bad = st.read_jsonl(os.path.join(out, "probe.jsonl"))
        self.assertEqual(bad, 0)
        points = [r for r in recs if "point" in r]
        repeats = [r for r in recs if "repeat_of" in r]
        self.assertEqual(sorted(r["point"] for r in points), sorted(p["id"] for p in m["points"]))
        short = sorted(r["point"] for r in points if not r["measured"]["oom"]
                       and r["config"]["seq_len"] * r["config"]["micro_batch"] <= 1024)
        self.assertTrue(short)
        self.assertEqual(sorted(r["repeat_of"] for r in repeats), short)
        for r in points + repeats:
            if r["measured"]["oom"]:
                continue
            meas = r["measured"]
            self.assertEqual(len(meas["step_times_s"]), 5)  # plan.MEASURED_STEPS: 5 steps, 2 dropped
            self.assertEqual(meas["warmup_steps"], 2)
            self.assertEqual([e["step"] for e in meas["ranks"][0]["memory_by_step"]], [1, 2, 5])
        ftest = os.path.join(ROOT, "build", "ftest")
        r = subprocess.run([ftest, "check", "--quiet", os.path.join(out, "probe.jsonl")],
                           capture_output=True, text=True, timeout=60)
        self.assertIn(f"{len(recs)} records", r.stdout, r.stderr[-1000:])
        self.assertIn(" 0 unreadable", r.stdout, r.stderr[-1000:])

    def test_over_budget_stop(self):
        out = os.path.join(self.tmp, "budget")
        run_driver(out, "--budget-min", "2.5")
        m = manifest(out)
        self.assertEqual(m["status"], "budget")
        self.assertLessEqual(m["budget"]["spent_s"], 150 + 5)
        self.assertTrue(m["left"])  # deferred as over budget, or cut at the budget's end
        done = sum(1 for p in m["points"] if p["status"] == "final")
        self.assertGreater(done, 0)
        starts = len([e for e in events(out) if e.get("event") == "point-start"])
        run_driver(out, "--budget-min", "2.5")  # nothing is left to spend
        self.assertEqual(len([e for e in events(out) if e.get("event") == "point-start"]), starts)
        self.assertEqual(manifest(out)["status"], "budget")
        run_driver(out, "--budget-min", "5")  # a later call with more budget resumes
        self.assertGreater(sum(1 for p in manifest(out)["points"] if p["status"] == "final"), done)


if __name__ == "__main__":
    if not os.path.exists(os.path.join(ROOT, "build", "ftest")):
        sys.exit("test_gpu_day: build/ftest and build/ftrain are needed (make)")
    unittest.main(verbosity=1)
