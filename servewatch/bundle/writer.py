"""The incident-bundle writer: atomic, private (0700 dir, 0600 files), rotated, and failing open.

`BundleWriter.write` never raises: a disk that is full, read-only or forbidden is counted in
`writer.failures`, reported as one line on stderr, and the count goes into the next bundle written.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from servewatch.detectors.verdict import Verdict
from servewatch.bundle import layout
from servewatch.bundle.layout import BundleContext
from servewatch.bundle.recompute import Recompute, detectors_recompute
from servewatch.timeline.samples import Sample

BUNDLE_NAME = re.compile(r"^incident-\d{8}T\d{6}Z-[a-z_]+-[0-9a-f]{8}(-\d+)?$")
TMP_PREFIX = ".incident-tmp-"
DEFAULT_KEEP = 4
PINS = ".pinned"     # in the out dir: names of bundles that rotation keeps, one per line

__all__ = ["BundleContext", "BundleWriter", "BUNDLE_NAME"]


def samples_of(window) -> list[Sample]:
    """The samples of a timeline Window (or any iterable of samples), time-ordered; a deployment's Window
    (Window.instances) as it is: its instances' samples are stored each named by its instance (layout)."""
    if getattr(window, "instances", ()):
        return window
    if hasattr(window, "samples") and callable(window.samples):
        return list(window.samples())
    return sorted(window, key=lambda s: s.t)


class BundleWriter:
    def __init__(self, out_dir: str | os.PathLike, keep: int = DEFAULT_KEEP,
                 max_file_bytes: int = layout.DEFAULT_MAX_FILE_BYTES,
                 max_sample_files: int = layout.DEFAULT_MAX_SAMPLE_FILES,
                 clock=None, stderr: TextIO | None = None, recompute: Recompute | None = None):
        """`recompute(samples, config_dict) -> verdicts` restates verdicts from the stored samples; by default
        the shipped detectors (servewatch.detectors.run_detectors)."""
        if keep < 1:
            raise ValueError("keep must be at least 1")
        if max_file_bytes < 4096:
            raise ValueError("max_file_bytes must be at least 4096")
        self.out_dir = Path(out_dir)
        self.keep = keep
        self.max_file_bytes = max_file_bytes
        self.max_sample_files = max_sample_files
        self.clock = clock
        self.stderr = stderr
        self.failures = 0
        self.bundles_written = 0
        self.last_failure: str | None = None
        self.recompute = recompute or detectors_recompute

    def write(self, window, verdicts: Sequence[Verdict], context: BundleContext | None = None) -> Path | None:
        """Write one bundle; its path, or None (counted, one line on stderr) when it could not be written."""
        tmp: Path | None = None
        try:
            context = context or BundleContext()
            samples = samples_of(window)
            created_t = self._created_t(context, samples)
            ident, files = layout.build_files(
                samples, verdicts, context, created_t=created_t, max_file_bytes=self.max_file_bytes,
                max_sample_files=self.max_sample_files, keep=self.keep, write_failures=self.failures,
                bundles_written=self.bundles_written, recompute=self.recompute)
            trigger = _trigger_name(files)
            self._ensure_out_dir()
            tmp = self.out_dir / f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
            os.mkdir(tmp, 0o700)
            os.chmod(tmp, 0o700)
            for name, data in files.items():
                _write_private(tmp / name, data)
            final = self._final_path(created_t, trigger, ident)
            os.rename(tmp, final)
            tmp = None
            _fsync_dir(self.out_dir)
            self.bundles_written += 1
            self._rotate()
            return final
        except Exception as exc:   # fail open: the recorder must keep watching whatever the disk does
            self.failures += 1
            self.last_failure = f"{type(exc).__name__}: {exc}"
            line = " ".join(self.last_failure.split())[:240]
            try:
                print(f"servewatch: incident bundle not written ({self.failures} failure(s) so far): {line}",
                      file=self.stderr or sys.stderr)
            except Exception:   # noqa: BLE001 - not even a closed stderr may reach the recorder
                pass
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            return None

    def bundles(self) -> list[Path]:
        """The bundles in out_dir, oldest first."""
        try:
            entries = [p for p in self.out_dir.iterdir() if BUNDLE_NAME.match(p.name) and p.is_dir()]
        except OSError:
            return []
        return sorted(entries, key=lambda p: p.name)

    # --- internals ------------------------------------------------------------------------------

    def _created_t(self, context: BundleContext, samples: Iterable[Sample]) -> float:
        if context.created_t is not None:
            return float(context.created_t)
        now = self.clock.now() if self.clock is not None else time.time()
        newest = max((t for t in (samples.end,) if t is not None) if getattr(samples, "instances", ()) else
                     (s.t for s in samples), default=now)
        return max(float(now), float(newest))

    def _ensure_out_dir(self) -> None:
        if not self.out_dir.is_dir():
            self.out_dir.mkdir(parents=True, mode=0o700)

    def _final_path(self, created_t: float, trigger: str, ident: str) -> Path:
        stamp = datetime.fromtimestamp(created_t, tz=timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        base = f"incident-{stamp}-{trigger}-{ident[:8]}"
        candidate = self.out_dir / base
        n = 2
        while candidate.exists():
            candidate = self.out_dir / f"{base}-{n}"
            n += 1
        return candidate

    def _rotate(self) -> None:
        """Keep the newest `keep` bundles besides the pinned ones; a bundle that cannot be removed is left
        (and costs nothing)."""
        kept = pinned(self.out_dir)
        existing = [b for b in self.bundles() if b.name not in kept]
        for old in existing[:max(0, len(existing) - self.keep)]:
            shutil.rmtree(old, ignore_errors=True)


def pinned(out_dir: str | os.PathLike) -> set[str]:
    """The bundle names in out_dir that rotation keeps (see `pin`)."""
    try:
        text = (Path(out_dir) / PINS).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return set()
    return {line.strip() for line in text.splitlines() if BUNDLE_NAME.match(line.strip())}


def pin(out_dir: str | os.PathLike, name: str) -> str | None:
    """Keep bundle `name` through every rotation from now on; the one line that says why not, or None."""
    return repin(out_dir, add={name})


def repin(out_dir: str | os.PathLike, *, add: Iterable[str] = (), remove: Iterable[str] = ()) -> str | None:
    """Pin the bundles named in `add` and release those in `remove` (one atomic rewrite of the pins);
    the one line that says why not, or None."""
    add, remove = set(add), set(remove) - set(add)
    bad = sorted(n for n in add if not BUNDLE_NAME.match(n))
    if bad:
        return f"{bad[0]!r} is not a bundle name"
    before = pinned(out_dir)
    names = (before | add) - remove
    if names == before:
        return None
    tmp = Path(out_dir) / f".pinned-tmp-{secrets.token_hex(4)}"
    try:
        _write_private(tmp, "".join(f"{n}\n" for n in sorted(names)).encode())
        os.replace(tmp, Path(out_dir) / PINS)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        what = ", ".join(sorted(add - before)) or "the pins"
        return f"{Path(out_dir) / PINS}: cannot pin {what} ({exc.strerror or exc})"
    return None


def _trigger_name(files: dict[str, bytes]) -> str:
    import json

    return json.loads(files[layout.INCIDENT])["trigger"]["verdict"]


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
