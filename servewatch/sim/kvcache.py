"""The KV block pool with prefix caching by block hashes (vLLM V1's BlockPool, reduced).

A block is free when no running request references it. Free blocks that hold a full, hashed block
of some prompt stay findable by that hash (the prefix cache) until they are reused: allocation takes
the least recently freed block first. Usage counts referenced blocks only, as vLLM's
`kv_cache_usage_perc` does (cached-but-free blocks are free).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence


class BlockPool:
    def __init__(self, num_blocks: int, *, enable_prefix_caching: bool = True):
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self._ref = [0] * num_blocks
        self._hash: list[Hashable | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self._cached: dict[Hashable, int] = {}
        self._evictable = 0   # free blocks still holding a cached block

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def usage(self) -> float:
        return self.num_used / self.num_blocks

    @property
    def num_evictable(self) -> int:
        """Free blocks that still hold a cached prefix block."""
        return self._evictable

    def lookup(self, hashes: Sequence[Hashable]) -> list[int]:
        """Blocks caching the longest prefix of `hashes` (not yet referenced)."""
        if not self.enable_prefix_caching:
            return []
        hits: list[int] = []
        for h in hashes:
            block = self._cached.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def touch(self, blocks: Sequence[int]) -> None:
        """Reference cached blocks found by `lookup`."""
        for b in blocks:
            if self._ref[b] == 0:
                del self._free[b]
                self._evictable -= 1
            self._ref[b] += 1

    def allocate(self, n: int) -> list[int] | None:
        """n fresh blocks (evicting cached ones, oldest first), or None if fewer than n are free."""
        if n > len(self._free):
            return None
        out = []
        for _ in range(n):
            b, _ = self._free.popitem(last=False)
            h = self._hash[b]
            if h is not None:
                self._evictable -= 1
                if self._cached.get(h) == b:
                    del self._cached[h]
                self._hash[b] = None
            self._ref[b] = 1
            out.append(b)
        return out

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference from each block; tail blocks are freed first so they are evicted first."""
        for b in reversed(blocks):
            self._ref[b] -= 1
            if self._ref[b] == 0:
                self._free[b] = None
                if self._hash[b] is not None:
                    self._evictable += 1

    def cache(self, block: int, block_hash: Hashable) -> None:
        if not self.enable_prefix_caching or self._hash[block] is not None:
            return
        if block_hash not in self._cached:
            self._cached[block_hash] = block
            self._hash[block] = block_hash
