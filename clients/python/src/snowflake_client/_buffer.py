"""The prefetch buffer: IDs fetched ahead in batches, handed out one at a time from memory,
never older than ``max_age``, and sized from the rate they are taken at.

The same sizing as the Rust client's (crates/snowflake-client/src/prefetch.rs): the low-water
mark covers the IDs taken while a refill is on its way (two fetch times plus the slack for the
refiller to be scheduled), the target one fetch more; both capped so that what is bought is
used within half of ``max_age``, and by the ``prefetch`` cap.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Deque, List, Optional, Tuple

#: How late the refiller may run after it was woken: a Python thread waits for the GIL (the
#: interpreter switches every 5 ms) on top of the scheduler's delay on a busy machine.
WAKE_SLACK = 0.05

#: The fewest IDs one refill asks for, however slowly IDs are taken (or the cap, if smaller).
MIN_FETCH = 256


class _Batch:
    """IDs of one ``NextIds`` answer."""

    __slots__ = ("ids", "next", "born")

    def __init__(self, ids: List[int], born: float):
        self.ids = ids
        self.next = 0
        #: When the request was sent (``time.monotonic()``): every ID in it was issued after
        #: this, so ``now - born`` is never less than an ID's real age.
        self.born = born


class Buffer:
    """Thread-safe. ``take`` is the hot path: one lock, no allocation."""

    def __init__(self, max_buffer: int, max_age: float):
        #: The most IDs kept (the client's ``prefetch``).
        self.max_buffer = max_buffer
        #: IDs fetched longer ago than this (seconds) are dropped, never handed out.
        self.max_age = max_age
        #: The fewest IDs one refill asks for.
        self.min_fetch = min(MIN_FETCH, max_buffer)
        self._lock = threading.Lock()
        self._batches: Deque[_Batch] = deque()
        self._len = 0
        #: Refill below this many IDs.
        self._low_water = self.min_fetch // 2
        #: Fill up to this many.
        self._target = self.min_fetch
        #: Set by a taker that saw the buffer below the low-water mark; cleared by the refiller.
        self._refill_wanted = True
        #: IDs handed out from the buffer (the rate estimate, and the statistics).
        self.taken = 0
        #: IDs dropped as stale or at close (the statistics).
        self.discarded = 0

    def take(self, now: float) -> Tuple[Optional[int], bool]:
        """The next ID not older than ``max_age`` at ``now`` (None: none left), and whether the
        refiller should be woken (the buffer fell below its low-water mark, first to see it)."""
        with self._lock:
            batches = self._batches
            while batches:
                front = batches[0]
                if now - front.born > self.max_age:
                    left = len(front.ids) - front.next
                    self.discarded += left
                    self._len -= left
                    batches.popleft()
                    continue
                id_ = front.ids[front.next]
                front.next += 1
                if front.next == len(front.ids):
                    batches.popleft()
                self._len -= 1
                self.taken += 1
                wake = self._len < self._low_water and not self._refill_wanted
                if wake:
                    self._refill_wanted = True
                return id_, wake
            wake = not self._refill_wanted
            self._refill_wanted = True
            return None, wake

    def push(self, ids: List[int], born: float) -> None:
        """Adds a fetched batch (its request sent at ``born``)."""
        if ids:
            with self._lock:
                self._len += len(ids)
                self._batches.append(_Batch(ids, born))

    def clear(self) -> int:
        """Drops every buffered ID (counted as discarded); how many."""
        with self._lock:
            n = self._len
            self._batches.clear()
            self._len = 0
            self.discarded += n
            return n

    def __len__(self) -> int:
        return self._len

    def evict_stale(self, now: float) -> int:
        """Drops what is stale at ``now`` (so that a buffer nobody takes from holds no old
        IDs); how many."""
        dropped = 0
        with self._lock:
            while self._batches and now - self._batches[0].born > self.max_age:
                front = self._batches.popleft()
                dropped += len(front.ids) - front.next
            self._len -= dropped
            self.discarded += dropped
        return dropped

    def refill_started(self) -> None:
        """The refiller starts a round: takers may ask again."""
        self._refill_wanted = False

    def wanted(self, max_per_call: int) -> int:
        """How many IDs to ask for now (0: none)."""
        missing = self._target - self._len
        if missing <= 0:
            return 0
        return max(min(missing, max_per_call), min(self.min_fetch, max_per_call))

    def resize(self, rate: float, fetch_time: float, max_per_call: int) -> None:
        """Sizes the buffer from the rate IDs are taken at (per second) and how long a fetch
        takes (seconds)."""
        cover = (fetch_time * 2.0 + WAKE_SLACK) * rate
        usable = rate * self.max_age / 2.0
        floor = float(self.min_fetch)
        low = max(min(cover, usable), floor / 2.0)
        target = low + min(float(max_per_call), max(cover, floor))
        target = max(min(target, max(usable, floor), float(self.max_buffer)), 1.0)
        self._target = int(target)
        self._low_water = int(max(min(low, target - 1.0), 0.0))

    def marks(self) -> Tuple[int, int]:
        """(low-water mark, target), for tests."""
        return self._low_water, self._target
