"""Every command's --help fits an 80-column terminal, never splits a name, and explains every flag.

Each parser of the CLI (commands and their subcommands) is formatted in-process, as `servewatch ... --help`
prints it, with COLUMNS unset (a pipe, a CI log) and with a wide terminal: no line over 80 columns; no verdict
name, flag or command name cut across two lines (a name is cut when the last word of a line and the first of
the next, put together, hold a name that neither holds alone: `not_se` + `rving`); every argument has help."""

from __future__ import annotations

import argparse
import re
import subprocess

import pytest

from servewatch.cli import HelpFormatter, build_parser
from servewatch.detectors import registry


def _walk(parser: argparse.ArgumentParser, name: str):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _walk(sub, f"{name} {sub_name}")


PARSERS = dict(_walk(build_parser(), "servewatch"))


def _names() -> set[str]:
    """The names a reader types or greps for: verdicts, every flag, every command."""
    found = set(registry.names())
    for name, parser in PARSERS.items():
        found.add(name.rsplit(" ", 1)[-1])
        for action in parser._actions:
            found.update(option for option in action.option_strings if len(option) > 2)
    return found


NAMES = _names()


def _cut_names(text: str) -> list[str]:
    """Names cut across a line break: `...not_se` / `rving,...` reads `not_serving` only when joined."""
    cut = []
    lines = [line for line in text.splitlines() if line.strip()]
    for above, below in zip(lines, lines[1:]):
        last, first = above.split()[-1], below.split()[0]
        joined = last + first
        cut += [name for name in NAMES if name in joined and name not in last and name not in first
                and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", joined)]
    return cut


@pytest.fixture(params=[None, "200"], ids=["COLUMNS-unset", "COLUMNS-200"])
def columns(request, monkeypatch):
    if request.param is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", request.param)
    return request.param


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_help_line_fits_80_columns_and_cuts_no_name(name, columns):
    parser = dict(_walk(build_parser(), "servewatch"))[name]          # built under this COLUMNS
    text = parser.format_help()
    too_long = [line for line in text.splitlines() if len(line) > 80]
    assert too_long == [], f"{name} --help: {len(too_long)} line(s) over 80 columns: {too_long[:3]}"
    assert _cut_names(text) == [], f"{name} --help cuts {_cut_names(text)} across lines"


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_name_in_a_help_text_is_printed_whole(name, monkeypatch):
    """Each verdict or flag name a command's description, epilog or flag help says is in its --help whole, as
    often as the texts say it (a name the wrapping cut would be missing once)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    parser = PARSERS[name]
    formatter = parser._get_formatter()
    texts = [parser.description or "", parser.epilog or ""]
    texts += [formatter._expand_help(action) for action in parser._actions if action.help
              and action.help != argparse.SUPPRESS]
    said = " ".join(texts)
    shown = parser.format_help()
    for word in NAMES:
        pattern = rf"(?<![\w-]){re.escape(word)}(?![\w-])"
        assert len(re.findall(pattern, shown)) >= len(re.findall(pattern, said)), (
            f"{name} --help: {word!r} is said {len(re.findall(pattern, said))} time(s) in its texts and printed "
            f"whole {len(re.findall(pattern, shown))} time(s)")


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_argument_is_explained(name):
    parser = PARSERS[name]
    unexplained = [action.option_strings or [action.dest] for action in parser._actions
                   if not isinstance(action, argparse._SubParsersAction) and not (action.help or "").strip()]
    assert unexplained == [], f"{name}: no help text for {unexplained}"
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            bare = [choice.dest for choice in action._choices_actions if not (choice.help or "").strip()]
            assert bare == [], f"{name}: subcommand(s) with no line of help: {bare}"


def test_the_formatter_keeps_a_hand_laid_table_and_fills_plain_text():
    """Unit: a plain paragraph is filled (its line breaks were the source's, not the reader's); a table row
    too long wraps under its own text column; a comma list breaks after a comma, never inside a name."""
    formatter = HelpFormatter("prog", width=40)
    filled = formatter._fill_text("one two\nthree four\n\n  3    a row of a table that is longer than forty "
                                  "columns\n  4    short", 40, "")
    assert filled.splitlines() == ["one two three four", "",
                                   "  3    a row of a table that is longer",
                                   "       than forty columns",
                                   "  4    short"]
    assert formatter._split_lines("default: alive_health_ok_no_progress,engine_dead,not_serving", 30) == [
        "default:", "alive_health_ok_no_progress,", "engine_dead,not_serving"]


def test_the_completion_install_lines_in_help_are_the_one_line_commands():
    """The install lines of `completion --help` are broken with a backslash to fit; joined again they are the
    one-line commands docs/site/completion.md shows (and tests/test_completion.py runs), and bash reads them."""
    from servewatch.commands.completion import INSTALL

    text = PARSERS["servewatch completion"].format_help()
    block = text.split("install (then open a new shell):\n", 1)[1].split("\n\n", 1)[0]
    commands = re.split(r"(?m)^  \w+:\n", block)[1:]
    joined = [re.sub(r" \\\n +", " ", command.strip()) for command in commands]
    assert joined == list(INSTALL.values())
    for command in commands:
        assert subprocess.run(["bash", "-n", "-c", command], capture_output=True, timeout=30).returncode == 0
