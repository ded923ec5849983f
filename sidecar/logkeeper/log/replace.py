"""Replacing a run of segments by new ones, crash-safely (cleaner, segment split, Spark hand-off).

Numbered crash steps (a crash test injects a failure after each one):

1. ``written``: the new segments were written with the ``.cleaned`` suffix and fsynced.
2. ``swapped``: each new segment was renamed ``.cleaned`` -> ``.swap``, highest base offset
   first, so an interruption leaves every remaining ``.cleaned`` file below every ``.swap``.
3. ``old-deleted``: each old segment was renamed to ``.deleted`` (removed for good later,
   after file.delete.delay.ms).
4. ``renamed``: each new segment dropped its ``.swap`` suffix and the directory was fsynced;
   unless ``sync_renamed`` is false: the cleaner replaces many groups a round, and the next
   group's step-2 fsync (or the last group's own) makes these renames durable. Until then a crash
   may leave the ``.swap`` names of this step, which the loader completes (below): a state that
   step 3's fsync already made possible, so nothing new can be found after a crash.

What the loader does with a directory left after a crash (``loader.py``):

- during or after step 1, or during step 2: ``.cleaned`` files exist, so they and every
  ``.swap`` at or above the lowest ``.cleaned`` offset are deleted; the old segments are
  untouched: the log is as it was before the replacement.
- after step 2, during step 3 or 4: only ``.swap`` files are left; old segment files within
  the swaps' offset range are deleted and the swaps are renamed into place: the log is as after
  the replacement.
- after step 4: nothing left to do except remove ``.deleted`` files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..fileio import CrashHook, fsync_dir
from .names import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX
from .segment import LogSegment
from .segments import LogSegments


def replace_segments(
    segments: LogSegments,
    new_segments: Sequence[LogSegment],
    old_segments: Sequence[LogSegment],
    *,
    directory: Path,
    schedule_delete: Callable[[list[LogSegment]], None],
    from_recovered_swap: bool = False,
    crash_hook: CrashHook | None = None,
    sync_renamed: bool = True,
) -> None:
    """Swap ``new_segments`` (suffix ``.cleaned``, already flushed) in for ``old_segments``.

    ``schedule_delete`` receives the old segments once renamed ``.deleted``; it removes their
    files now or after a delay. ``crash_hook(step)`` is called after each numbered step.
    """
    hook = crash_hook or (lambda _step: None)
    new_sorted = sorted(new_segments, key=lambda s: s.base_offset)
    old_sorted = sorted((s for s in old_segments if s.base_offset in segments), key=lambda s: s.base_offset)
    hook("written")
    if not from_recovered_swap:
        for seg in reversed(new_sorted):
            seg.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(directory)
    hook("swapped")
    for seg in reversed(new_sorted):
        segments.add(seg)
    new_offsets = {s.base_offset for s in new_sorted}
    first_new = new_sorted[0].base_offset if new_sorted else None
    for seg in old_sorted:
        if seg.base_offset != first_new and seg.base_offset not in new_offsets:
            segments.remove(seg.base_offset)
        seg.change_file_suffixes("", DELETED_SUFFIX)
    fsync_dir(directory)
    hook("old-deleted")
    for seg in new_sorted:
        seg.change_file_suffixes(SWAP_SUFFIX, "")
    if sync_renamed:
        fsync_dir(directory)
    hook("renamed")
    schedule_delete(old_sorted)
