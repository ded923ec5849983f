"""log/segments.py: the range lookups agree with each other."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from logkeeper.log.segments import LogSegments


def test_count_is_the_length_of_values_for_every_range() -> None:
    segs = LogSegments()
    for base in (0, 10, 20, 35):
        seg: Any = SimpleNamespace(base_offset=base)
        segs.add(seg)
    bounds = [None, *range(-1, 45)]
    for lo in bounds:
        for hi in bounds:
            assert segs.count(lo, hi) == len(segs.values(lo, hi)), (lo, hi)
    assert segs.count(12, 36) == 3  # the floor segment of 12 (10), 20 and 35
    assert LogSegments().count(0, 10) == 0
