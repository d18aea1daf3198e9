"""`serve --node NAME`: the engines on this node and each of their ranks' process state, for Prometheus.

Discovery (`sources.node.discover`, a walk of the node's processes) runs every DISCOVER_S; each engine found is
then sampled at the fleet's cadence through the same process source `--pid` uses (state, CPU share, threads).
The exported `servewatch_node_rank_state` joins with the API node's view in Prometheus, not in servewatch.
"""

from __future__ import annotations

import asyncio
import time

DISCOVER_S = 30.0


class NodeView:
    def __init__(self, node: str, interval_s: float, *, discover=None, probe_factory=None, clock=time.monotonic):
        from servewatch.sources import node as node_source
        from servewatch.sources.process import PsutilProbe

        self.node = node
        self.interval_s = interval_s
        self._discover = discover or node_source.discover
        self._probe_factory = probe_factory or PsutilProbe
        self._clock = clock
        self._probes: dict[tuple[int, float], tuple[object, object]] = {}   # (root pid, create time) -> (engine, probe)
        self._discovered_at: float | None = None
        self.samples: list[tuple[object, object]] = []    # (engine, newest process sample), what the exporter reads
        self.errors = 0

    def refresh(self) -> None:
        """One cycle (in a worker thread): discover when due, then sample every engine; an error is counted and
        the last good view kept."""
        try:
            now = self._clock()
            if self._discovered_at is None or now - self._discovered_at >= DISCOVER_S:
                found = {(e.root_pid, e.root_create_time): e for e in self._discover()}
                kept = {}
                for key, engine in found.items():
                    old = self._probes.get(key)
                    try:
                        kept[key] = (engine, old[1] if old else self._probe_factory(engine.root_pid))
                    except Exception:  # noqa: BLE001 - gone between discovery and sampling: next time
                        continue
                self._probes = kept
                self._discovered_at = now
            wall = time.time()
            self.samples = [(engine, probe.snapshot(wall)) for engine, probe in self._probes.values()]
        except Exception:  # noqa: BLE001 - a node view that failed once keeps its last good state
            self.errors += 1

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.refresh)
            await asyncio.sleep(self.interval_s)
