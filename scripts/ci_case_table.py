#!/usr/bin/env python3
"""Print the real-engine cases of a CI run as one table: first pass, retry, longest freeze measured.

Reads the JSON lines the conformance suites append to $SERVEWATCH_CASE_LOG (tests/conformance/lab_timing.py):
one line per attempt. A case is retried once only when it missed a timing bound while the freeze meter
measured a freeze long enough to explain it; its first attempt then reads "rerun".
Usage: scripts/ci_case_table.py CASE_LOG [--record FILE]

With --record (.ci/run gives it on a full run: no case, suite or stage left out), the counts are also written to
FILE, servewatch/lab/last_ci.json, the one place `servewatch --version` reads its real-engine claim from: commit it
after a clean-clone CI.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path


def rows(path: Path) -> list[dict]:
    cases: dict[str, list[dict]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            attempt = json.loads(line)
        except ValueError:
            continue
        cases.setdefault(attempt["case"], []).append(attempt)
    out = []
    for case, attempts in cases.items():
        first = attempts[0]
        retry = attempts[1] if len(attempts) > 1 else None
        out.append({"case": case,
                    "first": "failed, freeze-explained" if first["outcome"] == "rerun" else first["outcome"],
                    "retry": retry["outcome"] if retry else "-",
                    "freeze": max(a["longest_freeze_s"] for a in attempts),
                    "seconds": sum(a["seconds"] for a in attempts),
                    "failure": next((a["failure"] for a in attempts if a.get("failure")), "")})
    return out


def record(path: Path, table: list[dict], now: datetime.datetime, commit: str | None) -> dict:
    """The run's counts, as `servewatch --version` reads them (servewatch/lab/proven.py), written to `path`."""
    final = [r["retry"] if r["retry"] != "-" else r["first"] for r in table]
    doc = {"about": "the real-engine cases of the last full clean-clone CI run (.ci/run), written by "
                    "scripts/ci_case_table.py --record; servewatch --version says them",
           "when": now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           **({"commit": commit} if commit else {}),
           "cases": len(table), "passed": final.count("passed"), "failed": final.count("failed"),
           "retried": sum(r["first"] == "failed, freeze-explained" for r in table)}
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return doc


def _commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
                          cwd=Path(__file__).resolve().parents[1])
    return done.stdout.strip() or None


def main(argv: list[str]) -> int:
    recording = None
    if len(argv) == 4 and argv[2] == "--record":
        recording, argv = Path(argv[3]), argv[:2]
    if len(argv) != 2:
        print("usage: ci_case_table.py CASE_LOG [--record FILE]", file=sys.stderr)
        return 2
    path = Path(argv[1])
    if not path.is_file():
        print(f"ci: no real-engine case ran (no case log at {path})")
        return 0
    table = rows(path)
    width = max((len(r["case"]) for r in table), default=4)
    print(f"{'case':<{width}}  {'first pass':<24}  {'retry':<7}  {'longest freeze':>14}  {'time':>6}")
    for r in table:
        print(f"{r['case']:<{width}}  {r['first']:<24}  {r['retry']:<7}  {r['freeze']:>12.2f} s  {r['seconds']:>4.0f} s")
        if r["failure"]:
            print(f"{'':<{width}}    {r['failure']}")
    final = [r["retry"] if r["retry"] != "-" else r["first"] for r in table]
    print(f"ci: {len(table)} real-engine cases: {final.count('passed')} passed, {final.count('failed')} failed, "
          f"{sum(r['first'] == 'failed, freeze-explained' for r in table)} retried after a measured freeze")
    if recording is not None and table:
        record(recording, table, datetime.datetime.now(datetime.timezone.utc), _commit())
        print(f"ci: the counts written to {recording} (servewatch --version says them: commit it)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
