"""Tests of calibrate/host/profile_diff.py (run by tests/calibrate.c)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_diff as pd  # noqa: E402


class Moved(unittest.TestCase):
    def test_by_hand(self):
        old = {"date": "a", "threads": 2, "op_dispatch_s": 3.1e-8, "r": [1.0, 2.0, 4.0],
               "k": {"add": [10.0, 5.0]}, "gone": 1.0, "flag": True}
        new = {"date": "b", "threads": 2, "op_dispatch_s": 8.6e-6, "r": [1.2, 1.0, 5.1],
               "k": {"add": [10.0, 0.0]}, "extra": [3.0], "flag": False}
        # 1.2 / 1.0 = x1.20 stays; 1.0 / 2.0 = x0.5 and 5.1 / 4.0 = x1.275
        # move at 1.25; a zero moves; `gone` and `extra` are on one side only.
        got = [p for p, _, _ in pd.moved(old, new, 1.25)]
        self.assertEqual(got, ["op_dispatch_s", "r[1]", "r[2]", "k.add[1]", "gone", "extra[0]"])
        self.assertEqual([p for p, _, _ in pd.moved(old, new, 1.3)],
                         ["op_dispatch_s", "r[1]", "k.add[1]", "gone", "extra[0]"])
        self.assertEqual(pd.moved(old, old, 1.01), [])


if __name__ == "__main__":
    unittest.main()
