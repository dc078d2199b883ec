"""The day's state: an append-only event log in the output folder
(state.jsonl), folded into what is done, what is left and how much device
time has been spent. The log is the resume point: a second invocation reads
it and goes on; an invocation killed at any moment leaves a log whose every
line is whole (one write, then fsync), so nothing done is lost.

Events (one JSON object a line, all with "event", "call" and "at", the device
seconds since that call started):
  call-start   {budget_s, call_s, argv, plan_points}
  setup        {what, ok, detail}          one per set-up step of a call
  point-start  {point, attempt, first_in_process}
  point-end    {point, outcome, elapsed_s, message, final}
  defer        {point, reason}             not run in this call (budget, a missing
                                          package, a failing group); it stays pending,
                                          so a later call with what it lacked runs it
  heartbeat    {}                          the call is alive (its time counts)
  call-end     {reason}

A point's outcome is ok, oom, error, timeout, killed, cut or skipped
(deferred). ok and oom end the point, and so do error, timeout and killed
once retried (--retry gives those another chance: a "retry" event); a point whose last start has no end was in
flight when its call died: it is retried once (a second start without an end
makes it final, "killed"). "cut" (stopped at the call's deadline) is not
final and costs no attempt. A record or result that carries the point's id
(key "point") ends it as done whatever the log says: the record is the
proof, and a kill between the record and its end event loses nothing."""

import json
import os

FINAL = ("ok", "oom", "error", "timeout", "killed")
MAX_ATTEMPTS = 2


def append_json(path, obj):
    """One whole line, one write, then fsync (a kill leaves no half line)."""
    data = (json.dumps(obj, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path):
    """The whole JSON objects of a file, and the count of lines that were not."""
    out, bad = [], 0
    if not os.path.exists(path):
        return out, bad
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(obj, dict):
                out.append(obj)
            else:
                bad += 1
    return out, bad


class PointState:
    def __init__(self):
        self.status = "pending"   # pending | running | final
        self.outcome = None
        self.attempts = 0
        self.elapsed_s = 0.0
        self.message = ""
        self.calls = []

    def as_dict(self):
        return {"status": self.status, "outcome": self.outcome, "attempts": self.attempts,
                "elapsed_s": round(self.elapsed_s, 3), "message": self.message, "calls": self.calls}


class DayState:
    """The fold of the event log (and of the records' point ids)."""

    def __init__(self):
        self.points = {}
        self.calls = {}        # call -> {"spent_s", "reason", "budget_s", "call_s"}
        self.setup = []
        self.bad_lines = 0

    def point(self, ident):
        return self.points.setdefault(ident, PointState())

    def apply(self, ev):
        call = ev.get("call", 0)
        c = self.calls.setdefault(call, {"spent_s": 0.0, "reason": None})
        c["spent_s"] = max(c["spent_s"], float(ev.get("at", 0.0)))
        kind = ev.get("event")
        if kind == "call-start":
            c.update(budget_s=ev.get("budget_s"), call_s=ev.get("call_s"))
        elif kind == "call-end":
            c["reason"] = ev.get("reason")
        elif kind == "setup":
            self.setup.append(ev)
        elif kind == "point-start":
            self._start(self.point(ev["point"]), call)
        elif kind == "point-end":
            self._end(self.point(ev["point"]), ev)
        elif kind == "defer":
            p = self.point(ev["point"])
            if p.status != "final":
                p.status, p.outcome, p.message = "pending", "skipped", ev.get("reason", "")
        elif kind == "retry":
            p = self.point(ev["point"])
            p.status, p.attempts = "pending", 0

    @staticmethod
    def _start(p, call):
        if p.status == "final":
            return
        if p.status == "running":  # the last attempt never ended: it was killed
            p.message = "killed mid-way (its call ended without its end)"
        p.status = "running"
        p.attempts += 1
        p.calls.append(call)

    @staticmethod
    def _end(p, ev):
        if p.status == "final":
            return
        p.elapsed_s += float(ev.get("elapsed_s", 0.0))
        p.outcome, p.message = ev.get("outcome"), ev.get("message", "")
        if ev.get("outcome") == "cut":
            p.attempts = max(0, p.attempts - 1)
        p.status = "final" if ev.get("final") else "pending"

    def settle(self):
        """After the fold: a point still running was killed with its call; it
        goes back to pending for one more attempt, or ends as killed."""
        for p in self.points.values():
            if p.status == "running":
                if p.attempts >= MAX_ATTEMPTS:
                    p.status, p.outcome = "final", "killed"
                    p.message = "killed mid-way twice"
                else:
                    p.status, p.outcome = "pending", "killed"
                    p.message = "killed mid-way; retried"

    def mark_recorded(self, ident, outcome):
        """A record or result carries this point: it is done."""
        p = self.point(ident)
        if p.status != "final" or p.outcome not in ("ok", "oom"):
            p.status, p.outcome = "final", outcome
            if not p.message:
                p.message = "record found"

    def spent_s(self):
        return sum(c["spent_s"] for c in self.calls.values())

    def next_call(self):
        return max(self.calls) + 1 if self.calls else 1


def load(out_dir, record_files):
    """The state of out_dir: the log's fold, then every record's point."""
    st = DayState()
    events, st.bad_lines = read_jsonl(os.path.join(out_dir, "state.jsonl"))
    for ev in events:
        st.apply(ev)
    st.settle()
    for name in record_files:
        recs, bad = read_jsonl(os.path.join(out_dir, name))
        st.bad_lines += bad
        for r in recs:
            if isinstance(r.get("point"), str):
                oom = bool((r.get("measured") or {}).get("oom"))
                st.mark_recorded(r["point"], "oom" if oom else r.get("outcome", "ok"))
    return st
