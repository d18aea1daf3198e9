"""The docs site cannot drift: it builds strictly (a broken link or anchor fails), each command page's usage and
flags are what the parser says, every shown output is what a run gives now, and every command block either is
such a run or says why it is not run. The inputs the examples read (examples/) are there and valid."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.test_readme import owned_elsewhere
from tests.tools import in_ci

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "docs" / "site"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


examples = _load("readme_examples")
docs_commands = _load("docs_commands")
DOCUMENTS = examples.documents()


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- command pages ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(docs_commands.render_pages()), ids=_name)
def test_each_command_page_shows_the_parsers_usage_and_flags(path):
    current, expected = docs_commands.render_pages()[path]
    assert current is not None, f"{_name(path)} is missing: run `python scripts/docs_commands.py`"
    assert current == expected, f"{_name(path)} differs from the parser: run `python scripts/docs_commands.py`"


def test_the_flag_table_names_every_flag():
    """The generator itself: a page lists every option string of its command."""
    from servewatch.cli import build_parser

    pages = docs_commands.generated()
    parser = build_parser()
    for name, (sub, _) in docs_commands._subparsers(parser).items():
        for action in sub._actions:
            if action.help == argparse.SUPPRESS:
                continue                      # hidden from --help: hidden from the page
            for option in action.option_strings:
                assert f"`{option}" in pages[name], f"servewatch {name}: {option} is not on its page"


def _nav_pages(nav) -> set[str]:
    found = set()
    for entry in nav:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            found |= _nav_pages(value) if isinstance(value, list) else {value}
    return found


def test_every_page_is_in_the_nav():
    """A command added to the parser gets its page from the generator; the nav must list it (mkdocs --strict
    fails on a page outside the nav too, but only where mkdocs is installed)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = _nav_pages(config["nav"])
    pages = {str(path.relative_to(SITE)) for path in SITE.rglob("*.md")}
    assert not pages - listed, f"pages not in mkdocs.yml's nav: {sorted(pages - listed)}"


# --- the examples -------------------------------------------------------------------------------------------

def _regions() -> dict[str, list[tuple[Path, str]]]:
    found: dict[str, list[tuple[Path, str]]] = {}
    for path in DOCUMENTS:
        for name, body in examples.regions(path.read_text(encoding="utf-8")).items():
            found.setdefault(name, []).append((path, body))
    return found


REGIONS = _regions()


def test_every_region_is_known_to_the_script_and_every_example_is_shown():
    assert set(REGIONS) <= set(examples.EXAMPLES), sorted(set(REGIONS) - set(examples.EXAMPLES))
    assert set(examples.EXAMPLES) <= set(REGIONS), f"examples no page shows: {sorted(set(examples.EXAMPLES) - set(REGIONS))}"


DETERMINISTIC = sorted(name for name, (_, same) in examples.EXAMPLES.items() if same)


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_each_shown_output_is_what_a_run_gives_now(name):
    rendered = examples.render([name])[name]
    if rendered is None:
        message = f"{name}: cannot run here (promtool, of the Debian package prometheus, is not installed)"
        if in_ci():
            pytest.fail(message + "; under CI=true a missing tool fails the test")
        pytest.skip(message)
    for path, body in REGIONS.get(name, ()):
        assert body == rendered, f"{_name(path)}: the '{name}' example is stale: run `python scripts/readme_examples.py`"


def test_a_measured_example_says_when_and_where():
    """The demo's time is measured, so not compared (`--check` runs it; tests/test_demo.py runs the demo): what a
    page shows of it says when, on how many cores and under what load it was measured."""
    for path, body in REGIONS["demo-time"]:
        assert re.fullmatch(r"`servewatch demo --fast` took \d+\.\d s here \(\d{4}-\d\d-\d\d, \d+ cores, load "
                            r"average \d+\.\d; `scripts/readme_examples.py` measures it\)\.\n", body), (_name(path), body)


def test_the_promtool_count_is_the_alerts_plus_the_recording_rules(tmp_path):
    """Without promtool too: the quoted 'SUCCESS: N rules found' is the file's own count."""
    alerts, records = examples.rule_counts(tmp_path)
    quoted = re.search(r"SUCCESS: (\d+) rules found", REGIONS["rules-check"][0][1])
    assert quoted and int(quoted[1]) == alerts + records


FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = re.compile(r"<!-- not-run: (?P<why>[^>]{10,}) -->")


def _command_blocks(text: str):
    """(line, first line) of every fenced block that shows a command: a `$ ` prompt, or a bash block."""
    lines = text.splitlines()
    inside, start, lang = False, 0, ""
    for i, line in enumerate(lines):
        match = FENCE.match(line.strip()) if line.startswith("```") else None
        if match and not inside:
            inside, start, lang = True, i, match[1]
        elif line.startswith("```") and inside:
            inside = False
            body = lines[start + 1:i]
            if lang in ("bash", "sh", "shell", "console") or any(b.startswith("$ ") for b in body):
                yield start, lines[:start]


@pytest.mark.parametrize("path", [p for p in DOCUMENTS if not owned_elsewhere(p)], ids=_name)
def test_every_command_block_is_run_or_says_why_not(path):
    text = path.read_text(encoding="utf-8")
    spans = [(text[:m.start()].count("\n"), text[:m.end()].count("\n")) for m in examples.REGION.finditer(text)]
    unexplained = []
    for start, before in _command_blocks(text):
        if any(a <= start <= b for a, b in spans):
            continue
        previous = next((line for line in reversed(before) if line.strip()), "")
        if not NOT_RUN.fullmatch(previous.strip()):
            unexplained.append(start + 1)
    assert not unexplained, (f"{_name(path)}: command block(s) at line(s) {unexplained} are neither an example region "
                             "nor marked <!-- not-run: why -->")


def test_the_shipped_bundle_verifies():
    done = subprocess.run([sys.executable, "-m", "servewatch", "verify", examples.BUNDLE], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_shipped_model_config_is_llama_3_8b():
    import json

    config = json.loads((ROOT / "examples" / "llama-3-8b" / "config.json").read_text(encoding="utf-8"))
    assert (config["num_hidden_layers"], config["num_key_value_heads"], config["hidden_size"],
            config["vocab_size"]) == (32, 8, 4096, 128256)


# --- the site builds ----------------------------------------------------------------------------------------

def test_the_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        message = "needs mkdocs-material (pip install -e '.[test]'), which is not installed"
        if in_ci():
            pytest.fail(message + "; under CI=true a missing tool fails the test", pytrace=False)
        pytest.skip(message)
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "index.html").exists()
