"""memory_history.py: a compact summary of PyTorch's caching-allocator
snapshot, for the probe's --memory-history (docs/gpu-day.md, "Memory
history").

`torch.cuda.memory._snapshot()` (torch/cuda/memory.py, 2.11) is a dict:
"segments", each {device, address, total_size, stream, segment_type,
allocated_size, active_size, blocks: [{size, requested_size, state, frames}]},
the allocator's state now; and "device_traces", per device a list of events
{action, addr, size, stream, frames, time_us} kept by
`_record_memory_history(max_entries=N)` (the last N). The actions are the
CUDACachingAllocator's TraceEntry kinds: alloc, free_requested,
free_completed, segment_alloc, segment_free, segment_map, segment_unmap,
snapshot, oom (c10/cuda/CUDACachingAllocator.h). The pickle of a whole run is
tens of MiB; this module keeps what ftest needs to replay which cached block
the allocator reused: per segment its stream and size and its blocks, at the
moment the reserved total peaked when the trace reaches back to it, else now.

Pure functions of plain dicts, no torch import: tested on the CPU
(test_memory_history.py).
"""

import json
import os

# The trace actions that change the reserved total, with their sign.
RESERVE_SIGN = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
MAX_BLOCKS = 20000  # per point: a line stays under about a MiB (outputs.py's limits)
# memory-history.jsonl comes back with the day's files (at most 16 MiB each,
# calibrate/gpu_day/outputs.py): past this size a point writes a short line.
MAX_FILE_BYTES = 12 << 20
STATE_CODE = {"active_allocated": "a", "active_pending_free": "p", "active_awaiting_free": "p",
              "inactive": "i"}  # the C++ side says pending, memory.py's TypedDict awaiting


def frame_name(frames):
    """The innermost frame outside torch's own code, as "file.py:line:name"
    (torch's frames say where the allocator was called, not which tensor)."""
    if not frames:
        return None
    pick = next((f for f in frames if "/torch/" not in str(f.get("filename", ""))), frames[0])
    return f"{os.path.basename(str(pick.get('filename', '?')))}:{pick.get('line', 0)}:" \
           f"{pick.get('name', '?')}"


def trace_counts(trace):
    counts = {}
    for e in trace:
        counts[e.get("action", "?")] = counts.get(e.get("action", "?"), 0) + 1
    return counts


def reserved_peak_index(trace, reserved_end):
    """(index, reserved) of the first event after which the reserved total
    was highest, from the segment events; index -1 when the peak is at or
    before the trace's first event (the ring buffer dropped it)."""
    net = sum(RESERVE_SIGN.get(e.get("action"), 0) * int(e.get("size", 0)) for e in trace)
    reserved = reserved_end - net
    best, best_i = reserved, -1
    for i, e in enumerate(trace):
        sign = RESERVE_SIGN.get(e.get("action"), 0)
        if sign:
            reserved += sign * int(e.get("size", 0))
            if reserved > best:
                best, best_i = reserved, i
    if best_i >= 0:  # the allocation that needed the new memory comes next: include it
        nxt = best_i + 1
        if nxt < len(trace) and trace[nxt].get("action") == "alloc":
            best_i = nxt
    return best_i, best


def _segments_at(segments, later):
    """{address: [size, stream, type]} before the events `later` happened."""
    segs = {int(s["address"]): [int(s["total_size"]), s.get("stream", 0),
                                s.get("segment_type", "?")] for s in segments}
    for e in reversed(later):
        act, addr, size = e.get("action"), int(e.get("addr", 0)), int(e.get("size", 0))
        if act == "segment_alloc":
            segs.pop(addr, None)
        elif act == "segment_free":
            segs[addr] = [size, e.get("stream", 0), "?"]
        elif act in ("segment_map", "segment_unmap"):
            base = max((a for a in segs if a <= addr), default=None)
            if base is not None:
                segs[base][0] += size if act == "segment_unmap" else -size
                if segs[base][0] <= 0:
                    segs.pop(base)
    return segs


def _active_at(segments, later):
    """{address: [size, frame]} of the blocks in use before `later` happened."""
    live = {}
    for s in segments:
        addr = int(s["address"])
        for b in s.get("blocks", []):
            addr = int(b.get("address", addr))
            if b.get("state") != "inactive":
                live[addr] = [int(b["size"]), frame_name(b.get("frames"))]
            addr += int(b["size"])
    for e in reversed(later):
        act, addr = e.get("action"), int(e.get("addr", 0))
        if act == "alloc":
            live.pop(addr, None)
        elif act == "free_completed":
            live[addr] = [int(e.get("size", 0)), frame_name(e.get("frames"))]
    return live


def _blocks_now(segment):
    out = []
    for b in segment.get("blocks", []):
        out.append([int(b["size"]), int(b.get("requested_size", b["size"])),
                    STATE_CODE.get(b.get("state"), b.get("state")), frame_name(b.get("frames"))])
    return out


def _blocks_at_peak(addr, size, live):
    """The blocks of one segment at the peak: the live ones in address order,
    and the gaps between them as inactive (the allocator may have split them
    otherwise; the bytes are right)."""
    out, at = [], addr
    for a in sorted(x for x in live if addr <= x < addr + size):
        if a > at:
            out.append([a - at, 0, "i", None])
        out.append([live[a][0], live[a][0], "a", live[a][1]])
        at = a + live[a][0]
    if at < addr + size:
        out.append([addr + size - at, 0, "i", None])
    return out


def summarise(snapshot, device=0, peak_reserved_bytes=None):
    """The compact summary of one snapshot (a dict, see above)."""
    segments = [s for s in snapshot.get("segments", []) if s.get("device", device) == device]
    traces = snapshot.get("device_traces") or []
    trace = traces[device] if device < len(traces) else []
    reserved_end = sum(int(s["total_size"]) for s in segments)
    idx, reserved_peak = reserved_peak_index(trace, reserved_end)
    out = {"device": device, "reserved_end_bytes": reserved_end,
           "trace_events": len(trace), "trace_counts": trace_counts(trace),
           "peak_reserved_bytes": peak_reserved_bytes}
    if idx >= 0:
        later = trace[idx + 1:]
        segs, live = _segments_at(segments, later), _active_at(segments, later)
        out.update({"at": "reserved peak", "at_event": idx,
                    "reserved_at_bytes": sum(v[0] for v in segs.values())})
        rows = [{"address": a, "stream": v[1], "size": v[0], "type": v[2],
                 "blocks": _blocks_at_peak(a, v[0], live)} for a, v in sorted(segs.items())]
    else:
        out.update({"at": "end", "at_event": None, "reserved_at_bytes": reserved_end,
                    "why_not_peak": "no trace" if not trace else
                    "the trace does not reach back to the reserved peak"})
        rows = [{"address": int(s["address"]), "stream": s.get("stream", 0),
                 "size": int(s["total_size"]), "type": s.get("segment_type", "?"),
                 "blocks": _blocks_now(s)} for s in sorted(segments, key=lambda s: s["address"])]
    out["segments"], out["blocks_cut"] = rows, 0
    total = 0
    for r in rows:  # keep the line bounded: the largest runs have tens of thousands of blocks
        keep = max(0, min(len(r["blocks"]), MAX_BLOCKS - total))
        out["blocks_cut"] += len(r["blocks"]) - keep
        r["blocks"], total = r["blocks"][:keep], total + keep
    return out


def summary_line(point, summary):
    """One line of memory-history.jsonl."""
    return json.dumps({"point": point, **summary}, separators=(",", ":"), allow_nan=False) + "\n"


def bounded_line(path, point, summary):
    """The line to append to `path`: the summary, or, when the file would
    pass MAX_FILE_BYTES with it, the summary without its segments."""
    line = summary_line(point, summary)
    have = os.path.getsize(path) if os.path.exists(path) else 0
    if have + len(line) <= MAX_FILE_BYTES:
        return line
    short = {k: v for k, v in summary.items() if k != "segments"}
    short["segments_dropped"] = f"{path} would pass {MAX_FILE_BYTES} bytes"
    return summary_line(point, short)
