"""Running the day's commands: child processes with a watchdog, and the probe
processes that run many points each (calibrate/probes/ftest_probe.py --jobs).

Every child runs in its own process group and is killed with its parent
(PR_SET_PDEATHSIG), so a driver killed mid-job leaves nothing running on the
GPU into the next call, and a watchdog kill takes the child's own children
(torch.compile's workers) with it. All times are device seconds of the
context's clock (real seconds, or scaled ones in a dry run)."""

import ctypes
import json
import os
import signal
import subprocess
import time

import state as st

PR_SET_PDEATHSIG = 1
START_LIMIT_S = 150.0   # a probe process that has not started its first point by then is stuck
MIN_POINT_LIMIT_S = 60.0
LIMIT_FACTOR = 4.0      # a point may take this many times its estimate before the watchdog stops it
HEARTBEAT_S = 15.0


def point_limit(est_s, floor_s=MIN_POINT_LIMIT_S):
    return max(floor_s, LIMIT_FACTOR * est_s)


def _child_setup():
    os.setpgid(0, 0)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the watchdog and the group kill remain
        pass


def spawn(cmd, env, log_path, cwd=None):
    log = open(log_path, "ab")
    try:
        return subprocess.Popen([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=cwd, preexec_fn=_child_setup)
    finally:
        log.close()


def kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    proc.wait()


def tail(path, lines=40, max_bytes=65536):
    """The last lines of a file (a child's log), as text."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class CommandResult:
    def __init__(self, rc, elapsed_s, timed_out, cut, log_path):
        self.rc, self.elapsed_s, self.timed_out, self.cut, self.log_path = rc, elapsed_s, timed_out, cut, log_path

    def last_line(self):
        lines = [x for x in tail(self.log_path, 20).splitlines() if x.strip()]
        return lines[-1][:400] if lines else ""


def run_command(ctx, cmd, limit_s, name, hard=False):
    """Runs one command to its end, its limit, or the call's deadline. A
    `hard` command (set-up, validation: no plan point) has a limit in real
    seconds and no deadline: its limit is what the call keeps for it."""
    log_path = ctx.work_file(f"{name}.log")
    t0 = ctx.clock.now()
    if hard:
        limit_s /= ctx.clock.scale
    proc = spawn(cmd, ctx.child_env(), log_path, cwd=ctx.root)
    timed_out = cut = False
    while proc.poll() is None:
        now = ctx.clock.now()
        if now - t0 > limit_s:
            timed_out = True
        elif not hard and now > ctx.deadline():
            cut = True
        if timed_out or cut:
            kill(proc)
            break
        ctx.heartbeat()
        time.sleep(ctx.poll_s)
    res = CommandResult(proc.returncode, ctx.clock.now() - t0, timed_out, cut, log_path)
    ctx.child_log(name, cmd, res)
    return res


class ProbeRun:
    """One probe process over a chunk of one group's points."""

    def __init__(self, ctx, group, points):
        self.ctx, self.group, self.points = ctx, group, {p["id"]: p for p in points}
        n = ctx.next_seq()
        self.jobs = ctx.work_file(f"jobs-{group}-{n}.jsonl")
        self.events = ctx.work_file(f"events-{group}-{n}.jsonl")
        self.log = ctx.work_file(f"probe-{group}-{n}.log")
        self.cur, self.cur_t, self.first, self.offset = None, None, True, 0
        with open(self.jobs, "w", encoding="utf-8") as f:
            for p in points:
                f.write(json.dumps({"id": p["id"], "args": p["args"], "est_s": p["est_s"]}) + "\n")
        open(self.events, "a").close()

    def command(self, p0):
        c = self.ctx
        return c.probe_cmd + ["--jobs", self.jobs, "--events", self.events, "--record", c.out_file("probe.jsonl"),
                              "--world", str(p0["world"]), "--rank", str(p0["rank"]), "--gpu", c.gpu_key]

    def read_events(self):
        with open(self.events, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        whole = data[:data.rfind(b"\n") + 1]
        self.offset += len(whole)
        for line in whole.decode("utf-8", errors="replace").splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict) and ev.get("point") in self.points:
                self.on_event(ev)

    def on_event(self, ev):
        c = self.ctx
        if ev.get("event") == "start":
            self.cur, self.cur_t = ev["point"], c.clock.now()
            c.event("point-start", point=self.cur, first_in_process=self.first)
            self.first_of_cur, self.first = self.first, False
        elif ev.get("event") == "end" and ev["point"] == self.cur:
            outcome = ev.get("outcome", "error")
            final = outcome != "error" or self.first_of_cur
            msg = ev.get("message", "")
            if outcome == "error" and not final:
                msg += " (retried first in a fresh process)"
            c.end_point(self.cur, outcome, c.clock.now() - self.cur_t, msg, final)
            self.cur = None

    def watch(self, proc):
        """Waits for the process; returns why it ended (None: by itself)."""
        c, t0 = self.ctx, self.ctx.clock.now()
        while proc.poll() is None:
            self.read_events()
            now, why = c.clock.now(), None
            if self.cur is None and now - t0 > c.start_limit() and self.first:
                why = "start"
            elif self.cur is not None and now - self.cur_t > c.limit_of(self.points[self.cur]):
                why = "timeout"
            elif now > c.deadline():
                why = "deadline"
            if why:
                kill(proc)
                return why
            c.heartbeat()
            time.sleep(c.poll_s)
        self.read_events()
        return None

    def run(self):
        """Runs the chunk; returns the number of points that ended here, or
        -1 when the process never started a point."""
        c = self.ctx
        p0 = next(iter(self.points.values()))
        env = c.child_env()
        env.update(p0.get("env", {}))  # a group's points share one (the plan keeps them apart)
        proc = spawn(self.command(p0), env, self.log, cwd=c.root)
        why = self.watch(proc)
        ended = sum(1 for pid in self.points if c.state.point(pid).status == "final")
        if self.cur is not None:
            self.end_in_flight(why, proc.returncode)
        c.child_log(f"probe {self.group}", self.command(p0),
                    CommandResult(proc.returncode, 0.0, why == "timeout", why == "deadline", self.log))
        return -1 if self.first and why != "deadline" else ended

    def end_in_flight(self, why, rc):
        c, elapsed = self.ctx, self.ctx.clock.now() - self.cur_t
        if why == "timeout":
            c.end_point(self.cur, "timeout", elapsed, "stopped by the watchdog past "
                        f"{c.limit_of(self.points[self.cur]):.0f} s", True)
        elif why == "deadline":
            c.end_point(self.cur, "cut", elapsed, "stopped at the call's deadline; runs next call", False)
        else:
            last = c.state.point(self.cur).attempts >= st.MAX_ATTEMPTS
            c.end_point(self.cur, "killed", elapsed, f"the probe process died (exit {rc}): "
                        + (tail(self.log, 1) or "no output")[:300], last)
        self.cur = None
