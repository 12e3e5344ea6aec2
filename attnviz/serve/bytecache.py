"""A cache bounded by bytes, not entries: a trace grows with n² (bench/hooked.py), so a count
says nothing about memory. Least recently used entries go first; an entry remembers
which sessions read it, and `release` drops the ones whose sessions have all ended.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Entry:
    value: Any
    nbytes: int
    owners: set[str] = field(default_factory=set)
    pinned: bool = False  # kept when its sessions end (only the byte limit evicts it)


class ByteCache:
    """Thread-safe LRU cache holding at most `limit` bytes, as counted by `size_of(value)`."""

    def __init__(self, limit: int, size_of: Callable[[Any], int]) -> None:
        if limit <= 0:
            raise ValueError(f"limit={limit} must be a positive number of bytes")
        self.limit = limit
        self.size_of = size_of
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable, make: Callable[[], Any], owner: str | None = None) -> Any:
        """The cached value for `key`, else `make()` (cached if it fits in the limit at all)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                if owner is not None:
                    entry.owners.add(owner)
                return entry.value
        value = make()  # outside the lock: other sessions keep reading while this one computes
        size = int(self.size_of(value))
        if size > self.limit:
            return value
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:  # another session made it meanwhile: keep one copy
                entry.owners.update({owner} - {None})
                return entry.value
            self._entries[key] = _Entry(value, size, {owner} - {None})
            self.nbytes += size
            while self.nbytes > self.limit:
                _, old = self._entries.popitem(last=False)
                self.nbytes -= old.nbytes
        return value

    def release(self, alive: Callable[[str], bool]) -> int:
        """Drop entries read only by sessions that `alive` says have ended; returns bytes freed."""
        freed = 0
        with self._lock:
            for key in list(self._entries):
                entry = self._entries[key]
                entry.owners = {o for o in entry.owners if alive(o)}
                if not entry.owners and not entry.pinned:
                    del self._entries[key]
                    freed += entry.nbytes
            self.nbytes -= freed
        if freed:
            trim_heap()
        return freed

    def pin(self) -> int:
        """Keep every entry cached now when the sessions that read it end (e.g. the landing page's
        trace, made before the server opened); returns how many. The byte limit still applies."""
        with self._lock:
            for entry in self._entries.values():
                entry.pinned = True
            return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0
        trim_heap()


def trim_heap() -> bool:
    """Hand freed heap memory back to the OS (glibc's malloc_trim): the allocator settings `make
    run` uses keep up to 512 MiB of freed memory for reuse, which after a class has left is just
    RSS. False where there is no glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.malloc_trim(0))
