"""The README renders and tells the truth: its code fences balance, every `servewatch …` command it shows parses
with the current CLI, and the figures it quotes are what scripts/readme_examples.py gets from real runs."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shlex
from pathlib import Path

import pytest

from servewatch.cli import TAKES_A_COMMAND_LINE, build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^\s*```")


def _examples():
    spec = importlib.util.spec_from_file_location("readme_examples", ROOT / "scripts" / "readme_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fences(text: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines(), 1) if FENCE.match(line)]


def test_code_fences_balance():
    fences = _fences(README)
    assert len(fences) % 2 == 0, f"{len(fences)} code fences: one is not closed (fences at lines {fences})"


def test_no_heading_or_table_inside_a_code_block():
    """An unclosed fence shows the next section as code: no Markdown heading may sit inside a block."""
    inside, lines = False, README.splitlines()
    for i, line in enumerate(lines, 1):
        if FENCE.match(line):
            inside = not inside
        elif inside:
            assert not line.startswith("### "), f"line {i} is a heading inside a code block: {line}"


def _shown_commands() -> list[tuple[int, str]]:
    """(line, command) for every `$ servewatch …` line in a code block and every inline `servewatch …` span
    that is an invocation (not a synopsis with [options] or placeholders)."""
    found, inside = [], False
    lines = README.splitlines()
    for i, line in enumerate(lines, 1):
        j = i
        while inside and line.endswith("\\") and j < len(lines):      # a shell line continued
            line, j = line[:-1] + " " + lines[j].strip(), j + 1
        if FENCE.match(line):
            inside = not inside
            continue
        if inside:
            for m in re.finditer(r"(?:^\$ |; do |&& )(servewatch [^\n]*)", line):
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


COMMANDS = _shown_commands()


def test_the_readme_shows_commands():
    assert len(COMMANDS) >= 20, COMMANDS


class _Refused(Exception):
    pass


@pytest.mark.parametrize(("line", "command"), COMMANDS, ids=[f"line{line}" for line, _ in COMMANDS])
def test_every_shown_command_parses_with_the_current_cli(line, command):
    parser = build_parser()

    def refuse(self, message):
        raise _Refused(message)

    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(io.StringIO()):
        mp.setattr(argparse.ArgumentParser, "error", refuse)
        try:
            args = parser.parse_args(_args(command))
        except _Refused as exc:
            pytest.fail(f"README line {line}: `{command}` does not parse: {exc}")
    assert getattr(args, "func", None) is not None, f"README line {line}: `{command}` names no command"


# --- the quoted figures come from the script ---------------------------------------------------------------

def test_every_example_region_is_known_to_the_script():
    examples = _examples()
    assert set(examples.regions(README)) == set(examples.EXAMPLES)


@pytest.mark.parametrize("name", ["rules-counts", "rules-check", "requests"])
def test_the_readme_quotes_what_the_example_prints_now(name):
    examples = _examples()
    rendered = examples.render([name])[name]
    if rendered is None:
        pytest.skip(f"{name}: cannot run here (promtool not installed)")
    assert examples.regions(README)[name] == rendered, \
        f"README's '{name}' example is stale: run `python scripts/readme_examples.py`"


def test_promtools_rule_count_is_the_alerts_plus_the_recording_rules(tmp_path):
    """Without promtool too: the quoted 'SUCCESS: N rules found' is the file's own count."""
    examples = _examples()
    alerts, records = examples.rule_counts(tmp_path)
    quoted = re.search(r"SUCCESS: (\d+) rules found", examples.regions(README)["rules-check"])
    assert quoted and int(quoted[1]) == alerts + records
