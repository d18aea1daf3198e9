"""Write a run's files: requests.jsonl, server.jsonl, summary.json. Fail-open: a failing disk is
reported as a list of one-line problems, never an exception."""

from __future__ import annotations

import json
import os
from pathlib import Path


def prepare_out_dir(path: str | Path) -> Path:
    """Create the directory up front so an unwritable --out fails before the run, not after."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    probe = out / ".servewatch-write-test"
    probe.write_text("")
    probe.unlink()
    return out


def _write(path: Path, lines) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line)
            fh.write("\n")
    os.replace(tmp, path)


def write_outputs(result, out_dir: str | Path) -> list[str]:
    out = Path(out_dir)
    keep = result.config.keep_text
    problems: list[str] = []
    files = {
        "requests.jsonl": (json.dumps(r.to_json(keep), separators=(",", ":")) for r in result.records),
        "server.jsonl": (json.dumps(s.to_json(), separators=(",", ":")) for s in result.server_samples),
        "summary.json": [json.dumps(result.summary, indent=2, sort_keys=True)],
    }
    for name, lines in files.items():
        try:
            _write(out / name, lines)
        except OSError as exc:
            problems.append(f"could not write {out / name}: {exc.strerror or exc}")
    return problems
