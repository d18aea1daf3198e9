"""The bundles a path names, for `verify` and `summarize`: a bundle itself, or a directory of bundles (what
`watch --out`, `serve --out` and the demo's `bundles/` hold)."""

from __future__ import annotations

from pathlib import Path

from servewatch.bundle import layout
from servewatch.bundle.writer import BUNDLE_NAME


class NotFound(Exception):
    """The path does not exist: bad input (exit status 2), not a bundle that fails."""


def bundles_at(path: str | Path) -> tuple[Path, list[Path]]:
    """(path, the bundles it names): [path] itself when it holds manifest.json or holds no bundle (so that a
    directory that is neither is checked, and fails, as a bundle); else each subdirectory that holds
    manifest.json or is named as the writer names a bundle, by name (oldest first). Entries of a bundle
    directory that are not bundles (its pins, a half-written bundle's hidden directory, other files) are left
    out. Raises NotFound when the path does not exist."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise NotFound(f"{path}: no such file or directory")
    if not path.is_dir() or path.is_symlink() or (path / layout.MANIFEST).exists():
        return path, [path]
    try:
        inside = sorted(entry for entry in path.iterdir() if not entry.name.startswith("."))
    except OSError:
        return path, [path]
    found = [entry for entry in inside if entry.is_dir() and not entry.is_symlink()
             and ((entry / layout.MANIFEST).exists() or BUNDLE_NAME.match(entry.name))]
    return path, found or [path]
