"""The summary of the allocator's snapshot (memory_history.py) on hand-made
snapshots in torch's format (torch.cuda.memory._snapshot, 2.11): no torch.

The expected figures are derived by hand from each snapshot's story, written
out beside it."""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory_history as mh  # noqa: E402

MIB = 1 << 20
S1, S2 = 1_000_000, 10_000_000  # segment addresses
TORCH_FRAME = {"filename": "/venv/lib/torch/nn/functional.py", "line": 5, "name": "linear"}
ATTN = [TORCH_FRAME, {"filename": "/probe/model.py", "line": 20, "name": "attn"}]
WEIGHT = [{"filename": "/probe/train.py", "line": 10, "name": "forward"}]


def event(action, addr, size, frames=None, stream=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream,
            "frames": frames or [], "time_us": 0}


def story(emptied=False):
    """A 2 MiB segment S1 holds a 1 MiB weight (still alive at the end); a
    4 MiB segment S2 is reserved for a 4 MiB attention temporary, which is then
    freed. Reserved: 0 -> 2 -> 6 MiB, the peak right after the temporary's
    allocation (event 3). With `emptied`, empty_cache then returns S2."""
    trace = [event("segment_alloc", S1, 2 * MIB), event("alloc", S1, MIB, WEIGHT),
             event("segment_alloc", S2, 4 * MIB), event("alloc", S2, 4 * MIB, ATTN),
             event("free_requested", S2, 4 * MIB, ATTN),
             event("free_completed", S2, 4 * MIB, ATTN)]
    segs = [{"device": 0, "address": S1, "total_size": 2 * MIB, "stream": 0,
             "segment_type": "large", "allocated_size": MIB, "active_size": MIB,
             "blocks": [{"size": MIB, "requested_size": MIB - 24, "state": "active_allocated",
                         "frames": WEIGHT},
                        {"size": MIB, "requested_size": 0, "state": "inactive", "frames": []}]}]
    if emptied:
        trace.append(event("segment_free", S2, 4 * MIB))
    else:
        segs.append({"device": 0, "address": S2, "total_size": 4 * MIB, "stream": 0,
                     "segment_type": "large", "allocated_size": 0, "active_size": 0,
                     "blocks": [{"size": 4 * MIB, "requested_size": 0, "state": "inactive",
                                 "frames": []}]})
    return {"segments": segs, "device_traces": [trace]}


class Summary(unittest.TestCase):
    def at_peak(self, s):
        self.assertEqual(s["at"], "reserved peak")
        self.assertEqual(s["at_event"], 3)  # the segment_alloc of S2, then its allocation
        self.assertEqual(s["reserved_at_bytes"], 6 * MIB)
        self.assertEqual([(r["address"], r["size"]) for r in s["segments"]],
                         [(S1, 2 * MIB), (S2, 4 * MIB)])
        self.assertEqual(s["segments"][0]["blocks"],
                         [[MIB, MIB, "a", "train.py:10:forward"], [MIB, 0, "i", None]])
        # the temporary is alive at the peak; its frame is the caller's, not torch's
        self.assertEqual(s["segments"][1]["blocks"], [[4 * MIB, 4 * MIB, "a", "model.py:20:attn"]])

    def test_the_blocks_at_the_reserved_peak_are_replayed_from_the_end(self):
        s = mh.summarise(story(), 0, 6 * MIB)
        self.at_peak(s)
        self.assertEqual(s["reserved_end_bytes"], 6 * MIB)
        self.assertEqual(s["trace_counts"], {"segment_alloc": 2, "alloc": 2,
                                             "free_requested": 1, "free_completed": 1})

    def test_a_segment_freed_after_the_peak_is_put_back(self):
        s = mh.summarise(story(emptied=True))
        self.at_peak(s)
        self.assertEqual(s["reserved_end_bytes"], 2 * MIB)
        self.assertEqual(s["trace_counts"]["segment_free"], 1)

    def test_a_trace_that_misses_the_peak_gives_the_end(self):
        snap = story()
        snap["device_traces"][0] = snap["device_traces"][0][3:]  # the ring buffer kept 3
        s = mh.summarise(snap)
        self.assertEqual((s["at"], s["reserved_at_bytes"]), ("end", 6 * MIB))
        self.assertIn("does not reach back", s["why_not_peak"])
        self.assertEqual(s["segments"][0]["blocks"][0], [MIB, MIB - 24, "a", "train.py:10:forward"])
        self.assertEqual(s["segments"][1]["blocks"], [[4 * MIB, 0, "i", None]])

    def test_expandable_segments_map_and_unmap(self):
        # one expandable segment mapped in two 2 MiB pages, the second unmapped
        # by empty_cache at the end: 4 MiB at the peak, 2 at the end
        trace = [event("segment_map", S1, 2 * MIB), event("alloc", S1, MIB, WEIGHT),
                 event("segment_map", S1 + 2 * MIB, 2 * MIB),
                 event("alloc", S1 + MIB, 3 * MIB, ATTN),
                 event("free_completed", S1 + MIB, 3 * MIB, ATTN),
                 event("segment_unmap", S1 + 2 * MIB, 2 * MIB)]
        snap = {"segments": [{"device": 0, "address": S1, "total_size": 2 * MIB, "stream": 0,
                              "segment_type": "large", "blocks": [
                                  {"size": MIB, "requested_size": MIB, "state": "active_allocated",
                                   "frames": WEIGHT},
                                  {"size": MIB, "requested_size": 0, "state": "inactive",
                                   "frames": []}]}],
                "device_traces": [trace]}
        s = mh.summarise(snap)
        self.assertEqual((s["at"], s["at_event"], s["reserved_at_bytes"]),
                         ("reserved peak", 3, 4 * MIB))
        self.assertEqual(s["segments"][0]["blocks"],
                         [[MIB, MIB, "a", "train.py:10:forward"],
                          [3 * MIB, 3 * MIB, "a", "model.py:20:attn"]])

    def test_no_trace_gives_the_end(self):
        snap = story()
        snap["device_traces"] = []
        s = mh.summarise(snap)
        self.assertEqual((s["at"], s["why_not_peak"], s["trace_events"]), ("end", "no trace", 0))

    def test_the_line_is_bounded_and_one_json_line(self):
        old = mh.MAX_BLOCKS
        mh.MAX_BLOCKS = 2
        try:
            s = mh.summarise(story(), 0, 6 * MIB)
        finally:
            mh.MAX_BLOCKS = old
        self.assertEqual(s["blocks_cut"], 1)  # S1's two blocks kept, S2's one cut
        line = mh.summary_line("p/1", s)
        self.assertTrue(line.endswith("\n") and "\n" not in line[:-1])
        self.assertEqual(json.loads(line)["point"], "p/1")


if __name__ == "__main__":
    unittest.main()
