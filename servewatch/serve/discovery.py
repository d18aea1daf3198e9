"""Prometheus file_sd files, re-read when they change. A file that turns bad keeps its last good
targets; the error is said once (file, line, key) and counted."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

from servewatch.errors import ServewatchError
from servewatch.serve.targets import TargetSpec, read_file_sd


@dataclass
class Refresh:
    changed: bool
    errors: list[str] = field(default_factory=list)


class FileSd:
    def __init__(self, patterns: tuple[str, ...]):
        self.patterns = patterns
        self._seen: dict[str, tuple[float, int]] = {}      # path -> (mtime, size) last read
        self._good: dict[str, list[TargetSpec]] = {}        # path -> its last good targets
        self.errors = 0

    def paths(self) -> list[str]:
        found = []
        for pattern in self.patterns:
            matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
            found.extend(path for path in matches if path not in found)
        return found

    def targets(self) -> list[TargetSpec]:
        return [spec for path in self._good for spec in self._good[path]]

    def load_strict(self) -> list[TargetSpec]:
        """At start: every named file must be there and good (a ServewatchError otherwise)."""
        for path in self.paths():
            if not glob.has_magic(path) and not os.path.exists(path):
                raise ServewatchError(f"{path}: no such file_sd file")
        result = self.refresh()
        if result.errors:
            raise ServewatchError(result.errors[0])
        return self.targets()

    def refresh(self) -> Refresh:
        result = Refresh(changed=False)
        present = self.paths()
        for path in list(self._good):
            if path not in present:
                del self._good[path]
                self._seen.pop(path, None)
                result.changed = True
        for path in present:
            try:
                stat = os.stat(path)
            except OSError:
                continue          # a file being replaced: its last good targets stay
            stamp = (stat.st_mtime, stat.st_size)
            if self._seen.get(path) == stamp:
                continue
            self._seen[path] = stamp
            try:
                specs = read_file_sd(path)
            except ServewatchError as exc:
                self.errors += 1
                kept = len(self._good.get(path, ()))
                result.errors.append(f"{exc}" + (f" (keeping its last {kept} target(s))" if path in self._good else ""))
                continue
            if self._good.get(path) != specs:
                self._good[path] = specs
                result.changed = True
        return result
