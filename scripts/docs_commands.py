"""Write each command's usage and flags into its page, docs/site/commands/NAME.md, from servewatch.cli's parser.

A command page is prose written by hand and one generated part, between `<!-- generated: flags -->` and
`<!-- /generated -->`: the usage, the description and every flag with its help, exactly as argparse knows them,
so that a flag cannot be added, renamed or dropped without the page saying so. `python scripts/docs_commands.py`
rewrites the generated parts (and makes the page of a new command, and lists it in mkdocs.yml's nav); `--check` exits 1 naming every page that
differs. `python scripts/readme_examples.py` runs this too, and tests/test_docs.py compares.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
COMMANDS_DIR = ROOT / "docs" / "site" / "commands"
REGION = re.compile(r"<!-- generated: flags -->\n.*?<!-- /generated -->\n", re.S)
MKDOCS = ROOT / "mkdocs.yml"
NAV = re.compile(r"(?P<indent> *)# commands: written by scripts/docs_commands.py[^\n]*\n.*?# /commands\n", re.S)
WIDTH = "100"     # argparse wraps the usage at the terminal's width: one width for every machine


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """name -> (its parser, its one-line help in the parent's list)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (sub, helps.get(name, "")) for name, sub in action.choices.items()}
    return {}


def _home_free(text: str) -> str:
    """A default under this user's home or state directory, said the same on every machine."""
    for path, shown in ((os.environ.get("XDG_STATE_HOME"), "$XDG_STATE_HOME"),
                        (os.environ.get("XDG_CACHE_HOME"), "$XDG_CACHE_HOME"),
                        (os.path.join(os.path.expanduser("~"), ".local", "state"), "$XDG_STATE_HOME"),
                        (os.path.expanduser("~"), "~")):
        if path and len(path) > 1:
            text = text.replace(path, shown)
    return text


def _cell(text: str) -> str:
    return _home_free(" ".join(text.split()).replace("|", "\\|"))


def _flag_table(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    lines: list[str] = []
    for group in parser._action_groups:
        rows = []
        for action in group._group_actions:
            if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
                continue
            if action.option_strings:
                metavar = "" if action.nargs == 0 else " " + formatter._format_args(
                    action, formatter._get_default_metavar_for_optional(action))
                name = ", ".join(f"`{option}{metavar}`" for option in action.option_strings)
            else:
                name = f"`{formatter._format_args(action, formatter._get_default_metavar_for_positional(action))}`"
            words = formatter._expand_help(action) if action.help else ""
            rows.append(f"| {name} | {_cell(words) or '–'} |")
        if rows:
            lines += ["", f"**{group.title}**", "", "| argument | what it does |", "|---|---|", *rows]
    return lines


def _describe(parser: argparse.ArgumentParser, heading: str) -> list[str]:
    lines = [f"```text\n{parser.format_usage().strip()}\n```"]
    if parser.description:
        lines += ["", _cell(parser.description)]
    lines += _flag_table(parser)
    for name, (sub, words) in _subparsers(parser).items():
        lines += ["", f"{heading} `{sub.prog}`", ""]
        if words:
            lines += [_cell(words), ""]
        lines += _describe(sub, heading + "#")
    return lines


def generated() -> dict[str, str]:
    """command name -> its generated part, markers included."""
    from servewatch.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        out = {}
        for name, (sub, _) in _subparsers(parser).items():
            body = "\n".join(_describe(sub, "###"))
            out[name] = ("<!-- generated: flags -->\n"
                         "<!-- written by scripts/docs_commands.py from servewatch.cli's parser: edit the parser, "
                         "not this part -->\n"
                         "## Usage and flags\n\n" + body + "\n<!-- /generated -->\n")
        return out
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def one_liners() -> dict[str, str]:
    from servewatch.cli import build_parser

    return {name: words for name, (_, words) in _subparsers(build_parser()).items()}


def page_text(name: str, current: str | None, region: str, words: str) -> str:
    if current is None:
        return f"# servewatch {name}\n\n{words[:1].upper() + words[1:]}.\n\n{region}"
    if REGION.search(current) is None:
        return current.rstrip("\n") + "\n\n" + region
    return REGION.sub(lambda _: region, current, count=1)


def render_pages() -> dict[Path, tuple[str | None, str]]:
    """page -> (its text now or None, its text with the generated part as the parser says)."""
    words = one_liners()
    out = {}
    for name, region in generated().items():
        path = COMMANDS_DIR / f"{name}.md"
        current = path.read_text(encoding="utf-8") if path.exists() else None
        out[path] = (current, page_text(name, current, region, words.get(name, "")))
    return out


def nav_text(current: str) -> str:
    """mkdocs.yml with its Commands section listing every command's page, in the parser's order."""
    def put(m: re.Match) -> str:
        indent = m["indent"]
        entries = "".join(f"{indent}- {name}: commands/{name}.md\n" for name in one_liners())
        return (f"{indent}# commands: written by scripts/docs_commands.py from the parser (one entry per command)\n"
                f"{entries}{indent}# /commands\n")
    return NAV.sub(put, current, count=1)


def main(argv: list[str]) -> int:
    differ = []
    current = MKDOCS.read_text(encoding="utf-8")
    if nav_text(current) != current:
        differ.append(MKDOCS)
        if "--check" not in argv:
            MKDOCS.write_text(nav_text(current), encoding="utf-8")
    for path, (current, new) in render_pages().items():
        if current != new:
            differ.append(path)
            if "--check" not in argv:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(new, encoding="utf-8")
    if "--check" in argv and differ:
        for path in differ:
            print(f"{path.relative_to(ROOT)}: differs from the parser; run `python scripts/docs_commands.py`",
                  file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
