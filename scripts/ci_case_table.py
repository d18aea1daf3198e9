#!/usr/bin/env python3
"""Print the real-engine cases of a CI run as one table: first pass, retry, longest freeze measured.

Reads the JSON lines the conformance suites append to $SERVEWATCH_CASE_LOG (tests/conformance/lab_timing.py):
one line per attempt. A case is retried once only when it missed a timing bound while the freeze meter
measured a freeze long enough to explain it; its first attempt then reads "rerun".
Usage: scripts/ci_case_table.py CASE_LOG
"""

from __future__ import annotations

import json
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


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: ci_case_table.py CASE_LOG", file=sys.stderr)
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
