"""Incident bundles of the whole fleet under one directory (one subdirectory per target), held under a
total size: after each bundle, the oldest bundles of any target go until the total fits (the one just
written always stays). Each target's writer still keeps at most its newest few."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from servewatch.bundle.writer import BUNDLE_NAME

DEFAULT_CAP_BYTES = 1024 * 2**20


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


class FleetBundleQuota:
    def __init__(self, out_dir: str, cap_bytes: int = DEFAULT_CAP_BYTES):
        self.out_dir = Path(out_dir)
        self.cap_bytes = cap_bytes
        self.removed = 0
        self._lock = threading.Lock()

    def bundles(self) -> list[tuple[float, Path, int]]:
        """(mtime, path, bytes) of every bundle of every target, oldest first."""
        found = []
        for target_dir in self.out_dir.iterdir() if self.out_dir.is_dir() else ():
            if not target_dir.is_dir():
                continue
            for bundle in target_dir.iterdir():
                if BUNDLE_NAME.match(bundle.name) and bundle.is_dir():
                    try:
                        found.append((bundle.stat().st_mtime, bundle, _size(bundle)))
                    except OSError:
                        continue
        return sorted(found)

    def enforce(self, keep: str | None = None) -> None:
        with self._lock:
            bundles = self.bundles()
            total = sum(size for _, _, size in bundles)
            for _, path, size in bundles:
                if total <= self.cap_bytes:
                    break
                if keep is not None and str(path) == keep:
                    continue
                shutil.rmtree(path, ignore_errors=True)
                if not path.exists():
                    total -= size
                    self.removed += 1

    def sink(self) -> "QuotaSink":
        return QuotaSink(self)


class QuotaSink:
    """Placed after a target's bundle sink: the recorder calls sinks in order, one at a time, so the new
    bundle is on disk when this runs."""

    def __init__(self, quota: FleetBundleQuota):
        self.quota = quota

    def on_fired(self, fired):
        newest = max(self.quota.bundles(), default=None)
        self.quota.enforce(keep=str(newest[1]) if newest else None)
        return None

    def on_cleared(self, cleared) -> None:
        pass

    def close(self) -> None:
        pass
