"""The offset map: key -> latest offset, for the dirty section of a log.

``OffsetMap`` is the interface the cleaner needs (Kafka's ``OffsetMap``); ``SipHashOffsetMap``
implements it with an open-addressing table in one numpy array, probed by numba kernels.

Table layout (``table``: int64, shape ``(slots, 3)``, 24 bytes a slot, row-major so one slot is
one contiguous 24-byte run)::

    column  field    notes
    0       h1       first 64 bits of the key's SipHash-1-3-128 (see siphash.py), as int64
    1       h2       last 64 bits
    2       offset   the latest offset seen for the key; -1 marks an empty slot

A key's home slot is ``((h1 >> 32) * slots) >> 32`` (the top 32 bits of h1 scaled to the table:
uniform, no modulo); collisions probe linearly to the next slot, wrapping at the end. Two keys
are the same key when both hash words match. Deletion never happens (the map is cleared
between rounds).

Bounds, as Kafka's SkimpyOffsetMap: ``capacity_slots`` = memory / 24 (Kafka: memory / (16-byte
MD5 + 8)); the cleaner stops filling at ``max_entries = capacity_slots * load_factor`` entries,
which makes a partial map. ``utilization`` is size / capacity_slots, as Kafka reports it.

Unlike Kafka, the table is not always allocated at full capacity. ``prepare(max_new_keys)``
(the keyed records a round can put, an upper bound on its distinct keys) picks one of two modes:

- full: when ``max_new_keys / 0.7`` reaches a third of the capacity, one table of
  ``capacity_slots`` slots, filled up to ``max_entries``;
- growing: otherwise the table starts small and doubles (``grow``: rehash into a new table)
  whenever it is 70% full, up to the first power of two above ``max_new_keys / 0.7``. That limit
  is under two thirds of the capacity, so the old and the new table together never exceed
  ``capacity_slots * 24`` bytes, and the keys that can arrive never fill it past 70%.

A small dirty section thus probes a small, cache-resident table, where its inserts run much
faster than in a table of full capacity (bench/results/design_figures.md: offset map, growing
table).

A fresh random SipHash secret is drawn on every ``clear``.

Warming. The first touch of a fresh full-capacity table (the ``EMPTY`` fill of ``clear``) is
most of a one-shot process's map cost: page faults over ``capacity_slots * 24`` bytes, which on
some hosts (a VM backing guest memory on first use, transparent huge pages compacted on demand)
take far longer than the fill itself (bench/results/cleaner_output.md: the offset map's table
made while the logs open). Kafka pays it once, when a cleaner thread allocates its buffer,
outside every round. ``warm`` does the same on a background thread: it makes the full table
while the caller does other work (``logkeeper clean`` opens its logs); ``prepare`` waits for it,
and takes it when the round is in full mode (dropping it otherwise).

The map owns its layout and its hash: other kernels (map_kernel, filter_kernels, the backlog
sketch) reach the table only through this module's kernel helpers (``map_hash``, ``map_get``,
``map_put``, ``prefetch_home``, ``mark_superseded``, ``superseded_bit``), and are handed the map
as three typed views (``views``):

    view        type                          what
    table       int64 (slots, 3)              the slots, as above
    state       one row of ``STATE``          the secret (k0, k1) and the round's counters:
                                              entries, max_entries, grow_at (entries at which
                                              the table must grow first; int64 max when it
                                              cannot), latest (offset), superseded_base
    superseded  uint8 bitmap                  the superseded offsets, below

A kernel that puts keys updates ``entries`` and ``latest`` in the state row itself. Changing
the hash is one change here (``map_hash``, and siphash.py behind it): no other module names it
(tests/behaviour/test_hash_swap.py swaps it and cleans to the same bytes).

Superseded offsets. While a round's map is built (map_kernel), each put that replaces a key's
offset marks the replaced offset in ``superseded``, a bitmap over the dirty offsets from
``superseded_base`` (bit ``o - base``). The cleaning pass then decides a mapped record by its bit
(set: a later record of its key exists) without hashing its key or probing the table again,
which is what a lookup would answer: the record stays iff no later offset of its key was put.
Offsets outside the bitmap (the clean section below the base, a dirty section longer than the
bitmap) are looked up in the table. The bitmap is round scratch beside the table: one bit a
dirty offset, at most one byte a slot of capacity (1/24 of the map's memory), sized by
``prepare``; a map filled key by key (``put``) has none.
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..aot import intrinsic, kernel
from ..aot.signatures import record
from .siphash import key_hash, new_secret

BYTES_PER_SLOT = 24
EMPTY = -1
TABLE_FULL = -2  # map_put found no free slot
_MIN_SLOTS = 1 << 16
GROW_LOAD = 0.7  # a growing table doubles at this load

REHASH_PREFETCH_ROWS = 12  # _rehash prefetches the new home slot of the old row this far ahead
_prefetch_row = intrinsic("prefetch_row")

NEVER = np.iinfo(np.int64).max  # grow_at of a table that cannot grow

# The map's scalars as kernels see them (a one-row array: kernels read and update it in place).
STATE = record("map_state", [("k0", "<u8"), ("k1", "<u8"), ("entries", "<i8"), ("max_entries", "<i8"),
                             ("grow_at", "<i8"), ("latest", "<i8"), ("superseded_base", "<i8")])

Table = npt.NDArray[np.int64]
Bits = npt.NDArray[np.uint8]
State = npt.NDArray[np.void]
_NO_BITS = np.zeros(0, dtype=np.uint8)


def fresh_state() -> State:
    """A state row with a fresh random secret and empty counters: for a kernel that hashes keys
    the map's way without a map (the backlog sketch), or a map's own."""
    state = np.zeros(1, dtype=STATE)
    state["k0"], state["k1"] = new_secret()
    state["latest"] = -1
    return state


@runtime_checkable
class OffsetMap(Protocol):
    """Key -> latest offset, with Kafka's latest-offset tracking: the interface the cleaner's
    builder, filter and rounds use (cleaner.py, map_builder.py, filter.py). The kernels see it
    as its ``views``."""

    @property
    def capacity_slots(self) -> int: ...

    @property
    def max_entries(self) -> int:
        """Keys at which a round stops filling the map (a partial map)."""

    @property
    def size(self) -> int:
        """Distinct keys stored."""

    @property
    def latest_offset(self) -> int:
        """The last offset put or forwarded with ``update_latest_offset``; -1 when cleared."""

    def clear(self) -> None: ...

    def warm(self) -> None:
        """Start making the full-capacity table in the background (a hint: ``prepare`` uses it)."""

    def prepare(self, max_new_keys: int, first_offset: int = 0, end_offset: int = 0) -> None:
        """Clear, sized for a round of at most ``max_new_keys`` keys over [first_offset, end_offset)."""

    def grow(self) -> bool:
        """A larger table, every entry kept; False when it cannot grow."""

    def views(self) -> tuple[Table, State, Bits]:
        """(table, state, superseded): the map as kernels take it."""

    def put(self, key: bytes, offset: int) -> None: ...

    def get(self, key: bytes) -> int:
        """The offset stored for ``key``, or -1."""

    def update_latest_offset(self, offset: int) -> None: ...

    @property
    def utilization(self) -> float:
        """size / capacity_slots."""


@kernel(inline=True)
def home_slot(h1, slots):  # type: ignore[no-untyped-def]
    return np.int64(((np.uint64(h1) >> np.uint64(32)) * np.uint64(slots)) >> np.uint64(32))


@kernel(inline=True)
def map_hash(state, buf, pos, length):  # type: ignore[no-untyped-def]
    """The map's (h1, h2) of the key ``buf[pos:pos + length]``, under the secret in ``state``:
    the one place the key hash is chosen."""
    s = state[0]
    return key_hash(buf, pos, length, s.k0, s.k1)


@kernel(inline=True)
def prefetch_home(table, h1):  # type: ignore[no-untyped-def]
    """A hint to bring the home slot of ``h1`` into the cache, for a probe a little later."""
    _prefetch_row(table, home_slot(h1, table.shape[0]))


@kernel(inline=True)
def mark_superseded(bits, state, offset):  # type: ignore[no-untyped-def]
    """Set the bit of ``offset`` (a replaced offset) when the bitmap covers it."""
    d = offset - state[0].superseded_base
    if d >= 0 and d < bits.shape[0] * 8:
        bits[d >> 3] |= np.uint8(1 << (d & 7))


@kernel(inline=True)
def superseded_bit(bits, state, offset):  # type: ignore[no-untyped-def]
    """For a mapped record at ``offset``: 1 when a later offset of its key was put, 0 when none
    was, -1 when the bitmap does not cover ``offset`` (the table must be asked)."""
    d = offset - state[0].superseded_base
    if d < 0 or d >= bits.shape[0] * 8:
        return np.int64(-1)
    return np.int64((bits[d >> 3] >> (d & 7)) & 1)


@kernel()
def map_get(table, h1, h2):  # type: ignore[no-untyped-def]
    """The offset stored under (h1, h2), or -1."""
    slots = table.shape[0]
    i = home_slot(h1, slots)
    for _ in range(slots):
        off = table[i, 2]
        if off == EMPTY:
            return np.int64(EMPTY)
        if table[i, 0] == h1 and table[i, 1] == h2:
            return off
        i += 1
        if i == slots:
            i = 0
    return np.int64(EMPTY)


@kernel()
def map_put(table, h1, h2, offset):  # type: ignore[no-untyped-def]
    """Store offset under (h1, h2); return the offset it replaced, EMPTY when the key is new,
    TABLE_FULL when no slot is free."""
    slots = table.shape[0]
    i = home_slot(h1, slots)
    for _ in range(slots):
        off = table[i, 2]
        if off == EMPTY:
            table[i, 0] = h1
            table[i, 1] = h2
            table[i, 2] = offset
            return np.int64(EMPTY)
        if table[i, 0] == h1 and table[i, 1] == h2:
            table[i, 2] = offset
            return off
        i += 1
        if i == slots:
            i = 0
    return np.int64(TABLE_FULL)


@kernel("i8[][], i8[][] -> none", nrt=False)
def _rehash(old, new):  # type: ignore[no-untyped-def]
    """Every entry of ``old`` put into the empty table ``new``. The new slots are random: each is
    prefetched a few entries ahead, which shortens the main thread's time in a round's grows
    (bench/results/design_figures.md: offset map, rehash)."""
    slots = new.shape[0]
    for i in range(slots):
        new[i, 2] = EMPTY
    n = old.shape[0]
    for i in range(n):
        ahead = i + REHASH_PREFETCH_ROWS
        if ahead < n:  # an empty row's hash words are stale: a harmless hint
            _prefetch_row(new, home_slot(old[ahead, 0], slots))
        if old[i, 2] != EMPTY:
            map_put(new, old[i, 0], old[i, 1], old[i, 2])


@kernel("i8[][], map_state[], u1[], i8, i8, i8 -> i8")
def _put_key(table, state, buf, pos, length, offset):  # type: ignore[no-untyped-def]
    h1, h2 = map_hash(state, buf, pos, length)
    return map_put(table, h1, h2, offset)


@kernel("i8[][], map_state[], u1[], i8, i8 -> i8")
def _get_key(table, state, buf, pos, length):  # type: ignore[no-untyped-def]
    h1, h2 = map_hash(state, buf, pos, length)
    return map_get(table, h1, h2)


class SipHashOffsetMap:
    """OffsetMap over a numba-probed table keyed by a secret-keyed 128-bit SipHash."""

    def __init__(self, memory_bytes: int | None = None, *, slots: int | None = None,
                 load_factor: float = 0.9) -> None:
        if (memory_bytes is None) == (slots is None):
            raise ValueError("give exactly one of memory_bytes and slots")
        capacity = slots if slots is not None else int(memory_bytes or 0) // BYTES_PER_SLOT
        if capacity < 1:
            raise ValueError(f"an offset map needs at least one slot ({BYTES_PER_SLOT} bytes)")
        self._capacity = capacity
        self._table: Table = np.empty((0, 3), dtype=np.int64)
        self._superseded: Bits = _NO_BITS
        self._state = fresh_state()
        self._state["max_entries"] = int(capacity * load_factor)
        self._limit = capacity
        self._warming: threading.Thread | None = None
        self._warm: Table | None = None  # a full-capacity table made (touched) by ``warm``
        self.prepare(0)

    def warm(self) -> None:
        """Make the full-capacity table on a background thread (module docstring: warming);
        the next ``prepare`` waits for it. The fill runs without the GIL (numpy releases it)."""
        if self._warming is not None or self._warm is not None:
            return

        def make() -> None:
            try:
                table = np.empty((self._capacity, 3), dtype=np.int64)
                table[:, 2] = EMPTY  # touches every page
            except MemoryError:
                return  # a hint only: prepare allocates (and reports) the table itself
            self._warm = table

        self._warming = threading.Thread(target=make, name="offset-map-warm", daemon=True)
        self._warming.start()

    # ---------------------------------------------------------------- sizing
    @property
    def capacity_slots(self) -> int:
        return self._capacity

    @property
    def memory_bytes(self) -> int:
        """Bytes the table holds now (at most capacity_slots * 24)."""
        return int(self._table.nbytes)

    @property
    def max_entries(self) -> int:
        """Kafka's ``(int) (slots * loadFactor)``: a round stops filling the map here."""
        return int(self._state["max_entries"][0])

    @property
    def slots_limit(self) -> int:
        """The largest table this round may grow to."""
        return self._limit

    @property
    def grow_at(self) -> int:
        """Entries at which the table must grow before more keys go in (never, when at its limit)."""
        return int(self._state["grow_at"][0])

    def _set_grow_at(self) -> None:
        slots = self._table.shape[0]
        self._state["grow_at"] = NEVER if slots >= self._limit else int(slots * GROW_LOAD)

    def prepare(self, max_new_keys: int, first_offset: int = 0, end_offset: int = 0) -> None:
        """Clear the map, size its table for at most ``max_new_keys`` distinct keys and its
        superseded bitmap for the offsets [first_offset, end_offset) (within its bound)."""
        needed = int(max_new_keys / GROW_LOAD) + 1
        if needed * 3 >= self._capacity:
            self._limit = slots = self._capacity
        else:
            self._limit = min(self._capacity, max(_MIN_SLOTS, 1 << (needed - 1).bit_length()))
            slots = min(self._limit, _MIN_SLOTS)
        if self._warming is not None:
            self._warming.join()
            self._warming = None
        warm, self._warm = self._warm, None
        if warm is not None and slots == self._capacity and self._table.shape[0] != slots:
            self._table = warm
        elif self._table.shape[0] != slots:
            warm = None  # released before allocating
            self._table = np.empty((0, 3), dtype=np.int64)
            self._table = np.empty((slots, 3), dtype=np.int64)
        nbytes = min((max(0, end_offset - first_offset) + 7) // 8, self._capacity)
        self._superseded = np.zeros(nbytes, dtype=np.uint8) if nbytes else _NO_BITS
        self._state["superseded_base"] = first_offset
        self.clear()

    def grow(self) -> bool:
        """Double the table (up to its limit), keeping every entry; False when at the limit."""
        slots = self._table.shape[0]
        if slots >= self._limit:
            return False
        new = np.empty((min(self._limit, slots * 2), 3), dtype=np.int64)
        _rehash(self._table, new)
        self._table = new
        self._set_grow_at()
        return True

    def clear(self) -> None:
        self._table[:, 2] = EMPTY
        self._superseded.fill(0)
        self._state["entries"] = 0
        self._state["latest"] = -1
        self._state["k0"], self._state["k1"] = new_secret()
        self._set_grow_at()

    # ---------------------------------------------------------------- the views kernels take
    def views(self) -> tuple[Table, State, Bits]:
        """(table, state, superseded): the map as kernels take it (see the module docstring).
        The table is replaced when it grows: take the views again after ``grow``."""
        return self._table, self._state, self._superseded

    @property
    def secret(self) -> tuple[int, int]:
        """This round's hash secret (k0, k1)."""
        return int(self._state["k0"][0]), int(self._state["k1"][0])

    @property
    def superseded(self) -> Bits:
        """The superseded-offset bitmap of this round (see the module docstring); may be empty."""
        return self._superseded

    @property
    def superseded_base(self) -> int:
        return int(self._state["superseded_base"][0])

    @property
    def size(self) -> int:
        return int(self._state["entries"][0])

    @property
    def latest_offset(self) -> int:
        return int(self._state["latest"][0])

    def update_latest_offset(self, offset: int) -> None:
        self._state["latest"] = offset

    @property
    def utilization(self) -> float:
        return self.size / self._capacity

    # ---------------------------------------------------------------- single keys (tests, tools)
    def put(self, key: bytes, offset: int) -> None:
        size = self.size
        if size >= self._capacity:
            raise ValueError(f"attempted to add a new entry to a full offset map of {size} entries")
        slots = self._table.shape[0]
        if size >= int(slots * GROW_LOAD) and slots < self._capacity:
            self._limit = max(self._limit, min(self._capacity, slots * 2))  # beyond prepare()'s bound
            self.grow()
        self._superseded = _NO_BITS  # only map_kernel keeps the bitmap; lookups then decide
        buf = np.frombuffer(key or b"\x00", dtype=np.uint8)
        replaced = int(_put_key(self._table, self._state, buf, 0, len(key), offset))
        if replaced == TABLE_FULL:
            raise ValueError(f"offset map table of {self._table.shape[0]} slots is full")
        if replaced == EMPTY:
            self._state["entries"] = size + 1
        self._state["latest"] = offset

    def get(self, key: bytes) -> int:
        buf = np.frombuffer(key or b"\x00", dtype=np.uint8)
        return int(_get_key(self._table, self._state, buf, 0, len(key)))
