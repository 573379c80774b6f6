"""`LruCache`: a thread-safe map that forgets the least recently used entries past a budget (a
count, or bytes as `weigh` measures them). Shared by the engine's image-embedding cache and the
server's cache of extracted documents."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    def __init__(self, budget: int, weigh: Callable[[V], int] = lambda value: 1) -> None:
        """`budget`: the most the entries may weigh together; `weigh(value)`: 1 each by default."""
        self.budget, self.weigh = budget, weigh
        self._items: OrderedDict[K, V] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Keep `value` (a value heavier than the whole budget is not kept; a kept key is not replaced)."""
        weight = self.weigh(value)
        with self._lock:
            if key in self._items or weight > self.budget:
                return
            self._items[key] = value
            self._weight += weight
            while self._weight > self.budget:
                _, old = self._items.popitem(last=False)
                self._weight -= self.weigh(old)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
