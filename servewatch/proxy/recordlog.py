"""requests.jsonl for the proxy: one line per request, rotated by size, a bounded number of files kept."""

from __future__ import annotations

import json
import os

_encode = json.JSONEncoder(separators=(",", ":")).encode     # json.dumps with arguments builds one per call


class RecordLog:
    def __init__(self, path: str, *, max_bytes: int = 64 * 2**20, keep: int = 3):
        self.path = path
        self.max_bytes = max_bytes
        self.keep = max(1, keep)
        self._file = open(path, "a", encoding="utf-8")   # noqa: SIM115 - closed by close()
        self._size = self._file.tell()
        self.written = 0
        self.rotations = 0

    def write(self, record: dict) -> None:
        line = _encode(record) + "\n"
        if self._size + len(line) > self.max_bytes and self._size > 0:
            self._rotate()
        self._file.write(line)
        self._size += len(line)
        self.written += 1

    def flush(self) -> None:
        self._file.flush()

    def _rotate(self) -> None:
        self._file.close()
        for i in range(self.keep - 1, 0, -1):
            older = f"{self.path}.{i}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{i + 1}")
        if self.keep > 1:
            os.replace(self.path, f"{self.path}.1")
        else:
            os.remove(self.path)
        stale = f"{self.path}.{self.keep}"
        if os.path.exists(stale):
            os.remove(stale)
        self._file = open(self.path, "w", encoding="utf-8")   # noqa: SIM115
        self._size = 0
        self.rotations += 1

    def close(self) -> None:
        self._file.close()
