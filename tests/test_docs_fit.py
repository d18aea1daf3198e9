"""The built docs site fits its page: no code block scrolls sideways (a command cut at the edge, the install line
among them), and no markdown escape shows as text (`\\|` in a table).

The site is built as CI builds it (`mkdocs build --strict`). Every code block of every page is then laid out in one
page of the site itself (its theme, its stylesheets, the width of its content column) in headless Chromium, wide
and narrow, and each block's scroll width is compared with its box."""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools import in_ci, needs_tool, tool_path

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        message = "needs mkdocs-material (pip install -e '.[test]'), which is not installed"
        if in_ci():
            pytest.fail(message + "; under CI=true a missing tool fails the test", pytrace=False)
        pytest.skip(message)
    out = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=180, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("index.html") if "search" not in p.parts)


PRE = re.compile(r"<pre\b.*?</pre>", re.S)

# Laid out in the page, then each block's overflow written into the body for --dump-dom to print.
MEASURE = """<script>
window.addEventListener("load", function () {
  var over = [], blocks = document.querySelectorAll("article pre > code");
  blocks.forEach(function (code) {
    if (code.scrollWidth > code.clientWidth + 1) {
      over.push({source: code.closest("[data-source]").getAttribute("data-source"),
                 scroll: code.scrollWidth, box: code.clientWidth,
                 line: code.textContent.split("\\n").sort(function (a, b) { return b.length - a.length; })[0]});
    }
  });
  var out = document.createElement("div");
  out.id = "fit-result";
  out.textContent = JSON.stringify({blocks: blocks.length, over: over});
  document.body.appendChild(out);
});
</script>"""


def _harness(site: Path) -> tuple[Path, int]:
    """One page of the site (the reference page: its theme, stylesheets and content column) whose article holds
    every code block of the site, each tagged with its page; external links (fonts) left out: no network."""
    blocks = []
    for page in _pages(site):
        for block in PRE.findall(page.read_text(encoding="utf-8")):
            source = html.escape(str(page.relative_to(site).parent), quote=True)
            blocks.append(f'<div class="highlight" data-source="{source}">{block}</div>')
    base = (site / "reference" / "index.html").read_text(encoding="utf-8")
    base = re.sub(r'<link[^>]+href="https?://[^"]*"[^>]*>', "", base)
    base = re.sub(r"<script[^>]+src=\"https?://[^\"]*\"[^>]*></script>", "", base)
    article = re.compile(r'(<article class="md-content__inner md-typeset">).*?(</article>)', re.S)
    assert article.search(base), "the reference page has no article: the theme's layout changed"
    page = article.sub(lambda m: m[1] + "\n".join(blocks) + m[2], base, count=1).replace("</body>",
                                                                                         MEASURE + "</body>")
    harness = site / "reference" / "fit.html"
    harness.write_text(page, encoding="utf-8")
    return harness, len(blocks)


def _layout(harness: Path, width: int, height: int, profile: Path) -> dict:
    done = subprocess.run(
        [tool_path("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions",
         "--no-first-run", f"--user-data-dir={profile}", f"--window-size={width},{height}",
         "--virtual-time-budget=10000", "--dump-dom", harness.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<div id="fit-result">(.*?)</div>', done.stdout, re.S)
    assert found, "the page's measuring script did not run: " + done.stderr[-1000:]
    return json.loads(html.unescape(found[1]))


@pytest.mark.chromium
@needs_tool("chromium")
@pytest.mark.parametrize("width", [1280, 480], ids=["laptop-1280px", "narrow-480px"])
def test_no_code_block_of_the_site_scrolls_sideways(site, tmp_path, width):
    harness, count = _harness(site)
    assert count >= 50, f"only {count} code blocks found in the built site: the extraction is broken"
    result = _layout(harness, width, 900, tmp_path / "profile")
    assert result["blocks"] == count, result
    over = result["over"]
    assert over == [], (f"{len(over)} of {count} code blocks scroll sideways at {width} px, e.g. "
                        + "; ".join(f"{o['source']}: {o['scroll']} px in {o['box']} px: {o['line'][:90]!r}"
                                    for o in over[:5]))


def test_the_wrapping_stylesheet_is_on_every_page(site):
    """Without Chromium too: the stylesheet that wraps code blocks is built and linked from every page."""
    css = (site / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    rule = re.search(r"\.md-typeset pre > code\s*\{([^}]*)\}", css)
    assert rule and "white-space: pre-wrap" in rule[1] and "overflow-wrap: anywhere" in rule[1], css
    unlinked = [str(p.relative_to(site)) for p in _pages(site)
                if not re.search(r'<link rel="stylesheet" href="(\.\./)*stylesheets/extra\.css">',
                                 p.read_text(encoding="utf-8"))]
    assert unlinked == [], f"pages without the wrapping stylesheet: {unlinked}"


# Markdown's backslash escapes: where one shows as text outside a code block, the source escaped something the
# renderer did not take as an escape (a `\|` inside backticks in a table cell shows the backslash).
ESCAPE = re.compile(r"\\[\\`*_{}\[\]()#+\-.!|<>]")


def test_no_markdown_escape_shows_as_text(site):
    shown = []
    for page in _pages(site):
        text = page.read_text(encoding="utf-8")
        article = re.search(r'<article class="md-content__inner md-typeset">(.*?)</article>', text, re.S)
        body = PRE.sub("", article[1] if article else "")        # a code block shows what was typed: a shell's \
        for match in ESCAPE.finditer(html.unescape(re.sub(r"<[^>]+>", "", body))):
            shown.append(f"{page.relative_to(site).parent}: {match[0]!r}")
    assert shown == [], f"markdown escapes shown as text: {shown}"


# --- the verdict lines the pages show ---------------------------------------------------------------------

def _written_keys() -> dict[str, list[str]]:
    """The keys, in order, of each JSON line watch, guard, serve and the proxy write now (watch.output)."""
    from servewatch.detectors.verdict import Verdict
    from servewatch.sinks.base import Cleared, Fired
    from servewatch.watch.output import cleared_line, evidence_line, json_line

    verdict = Verdict(name="alive_health_ok_no_progress", t=10.0, onset=8.0, why="no progress for 2.0 s")
    return {"fired": list(json.loads(json_line(Fired(verdict, "bundles/b")))),
            "cleared": list(json.loads(cleared_line(Cleared(verdict, 12.0)))),
            "evidence_held": list(json.loads(evidence_line(verdict)))}


def _top_level_keys(text: str) -> list[str]:
    """The keys of a JSON object's first level, read as far as the text goes (a quote may stop at an elision)."""
    keys, depth, i, expect_key = [], 0, 0, False
    while i < len(text):
        char = text[i]
        if char == '"':
            end = i + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            if depth == 1 and expect_key:
                keys.append(text[i + 1:end])
                expect_key = False
            i = end + 1
            continue
        if char in "{[":
            depth += 1
            expect_key = char == "{" and depth == 1
        elif char in "}]":
            depth -= 1
        elif char == "," and depth == 1:
            expect_key = True
        i += 1
    return keys


def _event_lines():
    """(document, line number, the line with its hand-wrapped continuation lines joined) of every verdict line
    (`{"event": ...`) in a fenced block of the README or a page."""
    from tests.test_docs import DOCUMENTS, _name

    for path in DOCUMENTS:
        lines, inside = path.read_text(encoding="utf-8").splitlines(), False
        for i, line in enumerate(lines):
            if line.startswith("```"):
                inside = not inside
            elif inside and line.startswith('{"event": "'):
                joined, j = line, i + 1
                while j < len(lines) and lines[j].startswith(" ") and not lines[j].startswith("```"):
                    joined, j = joined + lines[j], j + 1
                yield _name(path), i + 1, joined


def test_every_verdict_line_a_page_shows_has_the_fields_written_now():
    """A whole line shows exactly the keys the code writes now, in its order (serve's lines add `target`); a
    quote that stops at an elision ("…", "...") shows only keys written now, in that order. A line copied from
    an older run (no `details`, `action`, `evidence_held`) fails: regenerate it (scripts/readme_examples.py)."""
    written = _written_keys()
    wrong = []
    for where, number, line in _event_lines():
        event = json.loads(line[:line.index(",")] + "}")["event"]
        assert event in written, f"{where}:{number}: an event the code does not write: {event!r}"
        try:
            keys = [key for key in json.loads(line) if key != "target"]
        except ValueError:
            if "…" not in line and "..." not in line:
                wrong.append(f"{where}:{number}: not one JSON object and no elision said")
                continue
            keys = [key for key in _top_level_keys(line) if key != "target"]
            if keys != [key for key in written[event] if key in keys] or not set(keys) <= set(written[event]):
                wrong.append(f"{where}:{number}: keys {keys} are not those written now, in order: {written[event]}")
            continue
        if keys != written[event]:
            wrong.append(f"{where}:{number}: keys {keys}, written now: {written[event]}")
    assert wrong == [], "verdict lines unlike what the code writes:\n" + "\n".join(wrong)


def test_the_key_reader_reads_a_cut_quote():
    assert _top_level_keys('{"event": "fired", "details": {"a": 1, "b": [1, {"c": 2}]}, "why": "x, \\"y\\"", …') == [
        "event", "details", "why"]
