"""Regenerate the kept `promtool test rules` cases: tests/rules/<naming>/{rules.yml,tests.yml} from
tests/rules/slo.yaml, for every dialect and metric naming. tests/test_rules_promtool.py fails
when the kept files differ from what this writes."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servewatch.derive.rule_tests import kept_files  # noqa: E402


def main() -> int:
    for path, text in kept_files(ROOT / "tests" / "rules").items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
