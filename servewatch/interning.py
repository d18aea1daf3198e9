"""One object for equal values that many scrapes repeat (bucket edges, a scrape's layout), in a bounded map."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Interner(Generic[V]):
    def __init__(self, kept: int):
        self.kept = kept
        self._found: dict[Hashable, V] = {}

    def get(self, key: Hashable, value: V) -> V:
        """The value first given for `key`; `value` becomes it when the key is new (the map is emptied
        once it holds `kept`)."""
        found = self._found.get(key)
        if found is None:
            if len(self._found) >= self.kept:
                self._found.clear()
            found = self._found[key] = value
        return found

    def made(self, key: Hashable, make: Callable[[], V]) -> V:
        """The value for `key`, made by `make()` the first time (the map is emptied once it holds `kept`)."""
        found = self._found.get(key)
        if found is None:
            found = self.get(key, make())
        return found
