"""The README and the docs site render and tell the truth: their code fences balance, every `servewatch …`
command they show parses with the current CLI, and the README stays what it is for (under 200 lines: what
servewatch is, the two commands, one real output, links into the site). The shown outputs themselves are
compared with a run now in tests/test_docs.py."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from servewatch.cli import TAKES_A_COMMAND_LINE, build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs" / "site").rglob("*.md"))]
FENCE = re.compile(r"^\s*```")


# Pages other helpers of issue 45 own and write (their blocks show typed completions and refusals on purpose):
# left to their authors here and in tests/test_docs.py.
OWNED_ELSEWHERE = {"completion.md", "collectives.md", "architecture.md"}


def owned_elsewhere(path: Path) -> bool:
    return str(path.relative_to(ROOT)).removeprefix("docs/site/") in OWNED_ELSEWHERE


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _fences(text: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines(), 1) if FENCE.match(line)]


@pytest.mark.parametrize("path", DOCUMENTS, ids=_name)
def test_code_fences_balance(path):
    fences = _fences(path.read_text(encoding="utf-8"))
    assert len(fences) % 2 == 0, f"{_name(path)}: {len(fences)} code fences: one is not closed (at lines {fences})"


@pytest.mark.parametrize("path", [p for p in DOCUMENTS if not owned_elsewhere(p)], ids=_name)
def test_no_heading_inside_a_code_block(path):
    """An unclosed fence shows the next section as code: no Markdown heading may sit inside a block."""
    inside, markdown = False, False
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            inside, markdown = not inside, line.strip() in ("```markdown", "```md")
        elif inside and not markdown:           # a shown Markdown file has headings of its own
            assert not line.startswith("## "), f"{_name(path)} line {i} is a heading inside a code block: {line}"


def test_the_readme_is_short_and_shows_the_two_commands():
    text = README.read_text(encoding="utf-8")
    lines = text.count("\n")
    assert lines < 200, f"README.md has {lines} lines: its sections belong in docs/site/"
    assert "servewatch demo --fast" in text and "pytest -q -n 2" in text
    assert "<!-- example:" in text, "the README shows one real output, as an example region"


def _shown_commands(text: str) -> list[tuple[int, str]]:
    """(line, command) for every `$ servewatch …` line in a code block and every inline `servewatch …` span
    that is an invocation (not a synopsis with [options] or placeholders)."""
    found, inside, shell = [], False, False
    lines = text.splitlines()
    for i, line in enumerate(lines, 1):
        j = i
        while inside and line.endswith("\\") and j < len(lines):      # a shell line continued
            line, j = line[:-1] + " " + lines[j].strip(), j + 1
        if FENCE.match(line):
            inside, shell = not inside, line.strip() in ("```bash", "```sh", "```shell")
            continue
        if inside:
            # a `$ ` prompt, or a bare line of a shell block; never a line of output ("servewatch serve was ...")
            start = r"(?:^\$ |^|; do |&& )" if shell else r"(?:^\$ |; do |&& )"
            for m in re.finditer(start + r"(servewatch (?![a-z]+:)[^\n]*)", line):   # not a message
                if "<TAB>" not in m[1]:                 # typed, not run: shell completion
                    found.append((i, m[1]))
        else:
            for m in re.finditer(r"`(servewatch (?![a-z]+:)[^`]+)`", line):   # not a message ("servewatch watch: …")
                # an invocation, not a synopsis ([options], placeholders) nor a command named in prose
                if not re.search(r"[\[\](){}…]|\.\.\.|\b[A-Z][A-Z_]{2,}\b", m[1]) and len(m[1].split()) > 3:
                    found.append((i, m[1]))
    return found


def _args(command: str) -> list[str]:
    """The argv of one shown command: shell pipes, chains, redirections, comments and `&` cut off, shell
    variables given a value."""
    command = command.split(" #", 1)[0]
    command = re.sub(r"\$\(pgrep[^)]*\)", "4242", command)
    lexer = shlex.shlex(command.replace("$SIM_PID", "4242").replace("$WRONG", "4242"), posix=True,
                        punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    argv = []
    for token in lexer:
        if token and set(token) <= set(";&|<>"):
            break
        argv.append(token)
    assert argv[0] == "servewatch", command
    argv = argv[1:]
    if argv and argv[0] in TAKES_A_COMMAND_LINE and "--" in argv:
        argv = argv[:argv.index("--")]        # the server's own command line, as servewatch.cli.main cuts it
    return argv


COMMANDS = [(path, line, command) for path in DOCUMENTS if not owned_elsewhere(path)
            for line, command in _shown_commands(path.read_text(encoding="utf-8"))]


def test_the_pages_show_commands():
    assert len(COMMANDS) >= 40, COMMANDS


class _Refused(Exception):
    pass


@pytest.mark.parametrize(("path", "line", "command"), COMMANDS,
                         ids=[f"{_name(path)}:{line}" for path, line, _ in COMMANDS])
def test_every_shown_command_parses_with_the_current_cli(path, line, command):
    parser = build_parser()

    def refuse(self, message):
        raise _Refused(message)

    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(io.StringIO()):
        mp.setattr(argparse.ArgumentParser, "error", refuse)
        try:
            args = parser.parse_args(_args(command))
        except _Refused as exc:
            pytest.fail(f"{_name(path)} line {line}: `{command}` does not parse: {exc}")
    assert getattr(args, "func", None) is not None, f"{_name(path)} line {line}: `{command}` names no command"


def test_the_readmes_links_lead_to_files():
    """mkdocs checks the site's links; the README is not in the site, so its own links are checked here."""
    text = README.read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text) if not t.startswith(("http://", "https://"))]
    assert targets, "the README links into the docs site"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {sorted(set(missing))}"
