"""docs/site/gpu.md: its Xid table is the package's (servewatch/detectors/xid.py), row for row, and its source named."""

from __future__ import annotations

import pathlib

from servewatch.detectors import xid

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "site" / "gpu.md"


def test_the_pages_xid_table_is_the_packages():
    text = PAGE.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    expected = [f"| {c} | {r.mnemonic} | {r.meaning} | {r.catalog_action} | {xid.ACTION_WORDS[r.action]} |"
                for c, r in sorted(xid.TABLE.items())]
    assert rows == expected
    assert "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html" in text
