"""The generated rules through Prometheus's own tool: `promtool check rules` on every dialect and name
naming, and the kept `promtool test rules` cases in tests/rules/ (a 14.4x burn pages in time, a
burn just over 1x opens only the ticket, a five-minute blip and zero traffic page nothing, waiting
fires before the e2e burn, the stall gauge fires, a vanished target fires absent())."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from servewatch.derive.engine_series import NAMINGS
from servewatch.derive.rule_tests import kept_files
from tests.tools import needs_tool, tool_path

RULES_DIR = Path(__file__).parent / "rules"
needs_promtool = needs_tool("promtool")
ALL_NAMINGS = [g for gens in NAMINGS.values() for g in gens]


def test_the_kept_rule_tests_are_what_the_generator_writes_today():
    stale = [str(path.relative_to(RULES_DIR)) for path, text in kept_files(RULES_DIR).items()
             if not path.exists() or path.read_text(encoding="utf-8") != text]
    assert not stale, f"regenerate with: python scripts/generate_rule_tests.py ({', '.join(stale)})"


@needs_promtool
@pytest.mark.parametrize("naming", ALL_NAMINGS)
def test_promtool_check_rules_accepts_every_generated_file(naming):
    result = subprocess.run([tool_path("promtool"), "check", "rules", str(RULES_DIR / naming / "rules.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
@pytest.mark.timeout(240)
@pytest.mark.parametrize("naming", ALL_NAMINGS)
def test_promtool_test_rules_passes_the_kept_cases(naming):
    result = subprocess.run([tool_path("promtool"), "test", "rules", "tests.yml"], cwd=RULES_DIR / naming,
                            capture_output=True, text=True, timeout=220)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "SUCCESS" in result.stdout


@needs_promtool
@pytest.mark.timeout(240)
def test_the_kept_cases_fail_against_rules_that_page_too_early(tmp_path):
    """The cases can fail: a page factor of 1 instead of 14.4 pages on the blip and on the slow burn."""
    source = RULES_DIR / "vllm-0.32"
    rules = (source / "rules.yml").read_text().replace("> (14.4 * 0.001)", "> (1 * 0.001)")
    (tmp_path / "rules.yml").write_text(rules)
    shutil.copy(source / "tests.yml", tmp_path / "tests.yml")
    result = subprocess.run([tool_path("promtool"), "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=220)
    assert result.returncode != 0
    assert "a five-minute blip" in result.stdout + result.stderr
