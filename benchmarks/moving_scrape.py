"""A real vLLM 0.32 scrape (51 kB) made to move: the text between the lines whose values a busy server
changes at every scrape (each `_total`, histogram bucket, `_count` and `_sum`), and those lines, so a
benchmark can serve or read the same scrape `at` any step, every count grown 0.1 % a step."""

from __future__ import annotations

from pathlib import Path

CAPTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "vllm_real" / "kv_pressure_t1.prom"
MOVING = ("_total{", "_bucket{", "_count{", "_sum{")


def split_capture(capture: Path = CAPTURE) -> tuple[list[str], list[tuple[str, float]]]:
    """The capture as fixed text between the lines whose value moves, and those lines (name, value)."""
    parts, moving, chunk = [], [], []
    for line in capture.read_text().splitlines(keepends=True):
        head = line.partition(" ")[0]
        if not line.startswith("#") and any(suffix in head[:line.find("{") + 1] for suffix in MOVING):
            parts.append("".join(chunk))
            chunk = []
            name, value = line.rsplit(" ", 1)
            moving.append((name, float(value)))
        else:
            chunk.append(line)
    parts.append("".join(chunk))
    return parts, moving


def body_at(parts: list[str], moving: list[tuple[str, float]], at: int) -> str:
    """The scrape at step `at`: the shapes of every histogram kept, only the counts grown."""
    chunks = [parts[0]]
    for k, (name, value) in enumerate(moving):
        chunks.append(f"{name} {value * (1 + at / 1000):.10g}\n")
        chunks.append(parts[k + 1])
    return "".join(chunks)
