"""Values worked out from objects the offline model is handed again and again, kept.

``create_agent`` binds the same tool objects before every model call, and every call
brings back the same bound descriptions: describing the tools and finding which one
serves each role again each time was most of the model's CPU per call. An entry is found
by the identity of the objects it was computed from and served only while they are the
same objects in the same state, so a different or changed tool list is worked out anew.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")


@dataclass(frozen=True)
class _Entry(Generic[V]):
    sources: tuple[object, ...]
    """Kept alive, so no other object can take one of their ids while the entry exists."""
    state: object
    """A deep copy of everything the value was computed from, as it was then."""
    value: V


class IdentityCache(Generic[V]):
    """The last ``size`` values of a pure computation, by the identity of its inputs.

    :meth:`get` serves an entry only if its inputs are the very objects it was computed
    from (their ids, which stay theirs while the entry keeps them alive) and the ``state``
    given now equals a deep copy taken then (so an object changed in place is recomputed).
    Safe to use from several threads.
    """

    def __init__(self, size: int):
        self._size = size
        self._entries: OrderedDict[tuple[int, ...], _Entry[V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, sources: tuple[object, ...], state: object, compute: Callable[[], V]) -> V:
        """The value for ``sources`` in ``state``: kept from before, or ``compute()`` now."""
        key = tuple(map(id, sources))
        with self._lock:
            entry = self._entries.get(key)
            # Same ids are the same objects: the entry keeps its sources alive.
            if entry is not None and entry.state == state:
                self._entries.move_to_end(key)
                return entry.value
        value = compute()
        fresh = _Entry(sources, copy.deepcopy(state), value)
        with self._lock:
            self._entries[key] = fresh
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return value
