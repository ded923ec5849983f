"""Cleaning states of a partition (Kafka's LogCleaningState) and their allowed transitions.

    state           may become                            how
    none            in-progress                           chosen for cleaning or for deletion
                    paused(1)                             abort-and-pause
    in-progress     none                                  done cleaning / done deleting
                    aborted                               abort-and-pause while cleaning
    aborted         paused(1)                             the cleaner noticed the abort and stopped
    paused(1)       none                                  resume
                    paused(2)                             abort-and-pause
    paused(n >= 2)  paused(n - 1), paused(n + 1)          resume, abort-and-pause

"none" is the absence of an entry. A paused partition is never chosen for cleaning or deletion.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InProgress:
    """A round is cleaning the partition."""

    def __str__(self) -> str:
        return "LogCleaningInProgress"


@dataclass(frozen=True, slots=True)
class Aborted:
    """A round was asked to stop; the partition is paused once it has."""

    def __str__(self) -> str:
        return "LogCleaningAborted"


@dataclass(frozen=True, slots=True)
class Paused:
    """Cleaning is paused, by ``count`` callers that each resume it once."""

    count: int

    def __str__(self) -> str:
        return f"LogCleaningPaused({self.count})"


LogCleaningState = InProgress | Aborted | Paused

IN_PROGRESS = InProgress()
ABORTED = Aborted()


def state_name(state: LogCleaningState | None) -> str:
    """A short name for status reports: none, in-progress, aborted, paused(n)."""
    if state is None:
        return "none"
    if isinstance(state, InProgress):
        return "in-progress"
    if isinstance(state, Aborted):
        return "aborted"
    return f"paused({state.count})"
