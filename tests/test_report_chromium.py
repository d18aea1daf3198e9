"""The summary page opens offline in headless Chromium, logs no console error, and its chart is drawn."""

from __future__ import annotations

import io
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from servewatch.cli import main
from servewatch.bundle.writer import BundleContext, BundleWriter
try:  # tests/ imported as a package or as a plain directory
    from tests.sinks_synthetic import stall_window, synthetic_recompute, synthetic_stall_verdicts
except ModuleNotFoundError:
    from sinks_synthetic import stall_window, synthetic_recompute, synthetic_stall_verdicts

from tests.tools import needs_tool, tool_path

pytestmark = [pytest.mark.chromium, needs_tool("chromium")]


def decode_png(data: bytes) -> tuple[int, int, list[bytearray]]:
    """(width, height, rows of RGB(A) bytes) for an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(line)
        previous = line
    return width, channels, rows


def test_summary_html_renders_offline_without_console_errors(tmp_path):
    window = stall_window()
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO(), recompute=synthetic_recompute)
    bundle = writer.write(window, synthetic_stall_verdicts(window), BundleContext(target_url="http://127.0.0.1:8000"))
    page = tmp_path / "report.html"
    assert main(["summarize", str(bundle), "--html", str(page)]) == 0
    shot = tmp_path / "shot.png"
    result = subprocess.run(
        [tool_path("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         "--window-size=1000,1100", f"--screenshot={shot}", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Failed to load" in line]
    assert console == []
    width, channels, rows = decode_png(Path(shot).read_bytes())
    band = line_blue = 0
    for row in rows:
        for x in range(0, width * channels, channels):
            r, g, b = row[x], row[x + 1], row[x + 2]
            if r > 235 and 215 < g < 245 and 215 < b < 245 and r - g > 8:
                band += 1                  # the verdict's translucent red band
            if b > r + 80 and b > 180:
                line_blue += 1             # the health series' blue line
    assert band > 5000, band
    assert line_blue > 200, line_blue
