"""Guard's memory of a server's earlier lives, across guard's own restarts.

Under systemd (`Restart=`) or Kubernetes, a server that fails at every start is restarted with guard
around it: each guard run sees one life, and N failures look like N unrelated ones while the bundle
rotation of `--out` pushes the first failure's evidence out. The ledger (a small private JSON file)
keeps the last lives; when the failed ones make a crash loop, guard says so once, naming the first
failure, and pins that failure's bundle so that rotation keeps it.

Pure decisions here; reading and writing the ledger fail open (a broken ledger is one line, and the
server is still guarded).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path

KEPT = 32        # lives in the ledger: far more than any crash-loop count


@dataclass(frozen=True, slots=True)
class Life:
    started: float                   # wall-clock seconds
    ended: float
    exit_status: int                 # guard's exit status for this life
    why: str                         # guard's one line for it
    stopped: bool = False            # ended because guard was asked to stop (a drain), not a failure
    first_verdict: str | None = None
    bundle: str | None = None        # the name (not the path) of the first verdict's bundle in --out
    loop_first: bool = False         # named as the first failure of a crash loop: its bundle stays pinned

    @property
    def failed(self) -> bool:
        return self.exit_status != 0 and not self.stopped


def streak(lives: list[Life], *, window_s: float) -> list[Life]:
    """The failed lives ending with the newest, none with a clean life between them, each ending within
    `window_s` of the newest's end (oldest first; empty when the newest life did not fail)."""
    run: list[Life] = []
    for life in reversed(lives):
        if not life.failed or lives[-1].ended - life.ended > window_s:
            break
        run.append(life)
    return run[::-1]


def crash_loop(lives: list[Life], *, count: int, window_s: float) -> list[Life] | None:
    """The failed lives that make a crash loop ending with the newest life: at least `count` failures,
    none with a clean life between them, the first ending within `window_s` of the newest's end."""
    run = streak(lives, window_s=window_s)
    return run if len(run) >= count else None


def pins(lives: list[Life], *, count: int, window_s: float) -> tuple[set[str], set[str]]:
    """(bundles to pin, bundles to release) after the newest life ended.

    Until a streak of failures is a crash loop, any of its lives may turn out to be the loop's first
    (the window slides), so the bundles of all of them are held against rotation: a failing server writes
    several bundles a life, and `--out` keeps only the newest few. Once the loop is said, its first
    failure's bundle stays pinned for good and the other holds are released; so are the holds of a streak
    a clean life ended or the window left behind."""
    run = streak(lives, window_s=window_s)
    if len(run) >= count:
        hold = {run[0].bundle}
    else:
        hold = {life.bundle for life in run}
    hold.discard(None)
    release = {life.bundle for life in lives if life.bundle and not life.loop_first} - hold
    return hold, release


def describe(run: list[Life]) -> str:
    first = run[0]
    span = run[-1].ended - first.ended
    cause = f" with {first.first_verdict}" if first.first_verdict else ""
    where = f"; its bundle {first.bundle} is pinned" if first.bundle else ""
    return (f"{len(run)} failed starts in {span:.0f} s; the first lasted {first.ended - first.started:.0f} s "
            f"and ended{cause}: {first.why}{where}")


def default_path(url: str, command: list[str] | None) -> Path:
    """One ledger per guarded server: the URL and the command that starts it."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    key = hashlib.sha256("\0".join([url, *(command or [])]).encode()).hexdigest()[:16]
    return Path(state) / "servewatch" / "guard" / f"lives-{key}.json"


def load(path: Path) -> tuple[list[Life], str | None]:
    """(the lives, or [] and the one line that says why not). A missing ledger is an empty one."""
    lives, why = _read(path)
    if why is not None:
        return [], f"{path}: unreadable guard ledger ({why}); starting a new one"
    return lives, None


def unreadable(path: Path) -> str | None:
    """Why the file at `path` is not a ledger guard can read and then replace, or None (it is one, or
    there is no file yet)."""
    return _read(path)[1]


def _read(path: Path) -> tuple[list[Life], str | None]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        names = {f.name for f in fields(Life)}
        return [Life(**{k: v for k, v in item.items() if k in names}) for item in raw["lives"]], None
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        return [], exc.strerror or str(exc)
    except UnicodeDecodeError:
        return [], "not UTF-8 text"
    except json.JSONDecodeError as exc:
        return [], f"not JSON: {exc.msg} at line {exc.lineno}"
    except (ValueError, KeyError, TypeError):
        return [], "JSON, but not a list of lives"


def save(path: Path, lives: list[Life]) -> str | None:
    """Write the newest KEPT lives atomically; the one line that says why not, or None."""
    try:
        path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        data = json.dumps({"lives": [asdict(life) for life in lives[-KEPT:]]}, indent=1).encode()
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".lives-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        return f"{path}: cannot write the guard ledger ({exc.strerror or exc})"
    return None
