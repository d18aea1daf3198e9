"""The `servewatch` command: a root parser and one module per subcommand in servewatch.commands."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from servewatch import __version__
from servewatch.commands import add_command
from servewatch.errors import USAGE, ServewatchError, exit_status_epilog

# Each module in servewatch.commands declares its parser (servewatch.commands.add_command reads HELP, DESCRIPTION,
# `run(args) -> int` and `arguments(parser)`). Modules import their heavy dependencies inside `run`, so `--help`
# stays fast.
COMMANDS = ("inspect", "sim", "load", "watch", "guard", "serve", "verify", "summarize", "postmortem", "diagnose",
            "advise", "rules", "dashboard", "demo", "lab", "canary", "drill", "proxy", "requests", "collectives",
            "completion", "gpu_check")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every --help at most 80 columns (narrower on a narrower terminal), a word never split: no break inside a
    word, at a hyphen (`--drain-timeout`) or an underscore (`not_serving`); a comma-separated list may break
    after a comma. A description or epilog paragraph of plain lines is filled; one laid out by hand (a line
    that starts indented: a table, examples) keeps its lines, a line too long wrapped under its own text."""

    WIDTH = 80

    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        if width is None:
            import shutil

            width = min(self.WIDTH, max(40, shutil.get_terminal_size().columns - 2))
        super().__init__(prog, indent_increment, max_help_position, width)

    @staticmethod
    def wrap(text: str, width: int, indent: str = "", hang: str = "") -> list[str]:
        import re
        import textwrap

        class Wrapper(textwrap.TextWrapper):
            def _split(self, chunk):                         # spaces, and after a comma inside a,b,c
                return [part for part in re.split(r"(\s+|(?<=,)(?=[^\s,]))", chunk) if part]

        return Wrapper(max(width, 20), initial_indent=indent, subsequent_indent=hang, break_long_words=False,
                       break_on_hyphens=False).wrap(text) or [indent.rstrip()]

    def _split_lines(self, text, width):
        return self.wrap(self._whitespace_matcher.sub(" ", text).strip(), width)

    def _fill_text(self, text, width, indent):
        import re

        out: list[str] = []
        for paragraph in re.split(r"\n[ \t]*\n", text.strip("\n")):
            lines = paragraph.splitlines()
            if any(line[:1].isspace() for line in lines):
                rows: list[list[str]] = []                            # [own indent, text's column, text]
                for line in lines:
                    own = line[:len(line) - len(line.lstrip())]
                    if rows and rows[-1][1] and len(own) == len(rows[-1][1]):
                        rows[-1][2] += " " + line.strip()              # a continuation of "  6    text"
                        continue
                    lead = re.match(r"\s*\S+ {2,}", line)             # "  6    text": wrapped under the text
                    rows.append([own, " " * len(lead[0]) if lead else "", line.strip()])
                for own, hang, words in rows:
                    hang = hang if hang and len(hang) < width // 2 else own + "  "
                    out += self.wrap(words, width, indent + own, indent + hang)
            else:
                out += self.wrap(" ".join(line.strip() for line in lines), width, indent, indent)
            out.append("")
        return "\n".join(out[:-1])


class _Parser(argparse.ArgumentParser):
    """A usage error is one line, as every other bad input (the usage itself is in --help). Subcommand
    parsers are of this class too: argparse makes them of the class of the parser they hang from; each gets
    HelpFormatter, whatever formatter_class its command asked for."""

    def __init__(self, *args, **kwargs):
        kwargs["formatter_class"] = HelpFormatter
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def format_help(self) -> str:
        """Every command's --help ends with the one exit-status table (servewatch/errors.py), added here once;
        a command whose epilog has a table of its own in the same terms (guard, drill) shows that one."""
        text = super().format_help()
        if "exit status" in (self.epilog or ""):
            return text
        return text.rstrip("\n") + "\n\n" + exit_status_epilog() + "\n"


class _Version(argparse.Action):
    """`--version`: the package's version and the engine versions it was proven on (servewatch.lab.proven),
    read only when asked, so that parsing stays fast."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from servewatch.lab.proven import version_lines

        print("\n".join(version_lines(__version__)))
        parser.exit(0)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only` (a name in COMMANDS), the root with that one command's parser, which is all a
    command line naming it needs: each command module's imports (the recorder's, for watch, guard, serve and proxy)
    cost a command line that runs another one 0.4 to 0.9 s (measured on a 2-core VM, 2026-12-07)."""
    parser = _Parser(
        prog="servewatch",
        description="Flight recorder, doctor and watchdog for LLM inference servers.",
    )
    parser.add_argument("--version", action=_Version, help="the version, and the engine versions it was proven on")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        try:
            module = importlib.import_module(f"servewatch.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"servewatch.commands.{name}":
                continue  # command not built yet
            raise
        add_command(subparsers, module)
    return parser


# Commands that take a command line of their own after `--` (`servewatch guard URL -- vllm serve ...`):
# everything after the first `--` is that command line, untouched by this parser.
TAKES_A_COMMAND_LINE = ("guard",)


# Commands that need the whole parser whatever they are asked: `completion` writes the script of every command.
NEEDS_EVERY_COMMAND = ("completion",)


def chosen_command(argv: list[str]) -> str | None:
    """The module name of the command a command line names first (`gpu-check` -> gpu_check), if it is one
    whose parser alone will do; else None (the root's --help and --version, an unknown word, `completion`)."""
    name = argv[0].replace("-", "_") if argv else None
    if name not in COMMANDS or name in NEEDS_EVERY_COMMAND or name.replace("_", "-") != argv[0]:
        return None
    return name


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(chosen_command(argv))
    server_command: list[str] = []
    if argv and argv[0] in TAKES_A_COMMAND_LINE and "--" in argv:
        cut = argv.index("--")
        argv, server_command = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    args.server_command = server_command
    args.root_parser = parser          # for `completion`, which writes the script of the whole parser
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from servewatch import stopping

    stopping.interrupt_on_termination()     # SIGTERM and SIGHUP stop every command as ^C does (servewatch.stopping)
    try:
        return int(args.func(args) or 0)
    except ServewatchError as exc:
        print(f"servewatch {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        stopping.say(args.command)
        return stopping.status()
    except BrokenPipeError:
        # The reader of stdout went away (`| head`): nothing more to say to it. As the Python docs advise,
        # point stdout at devnull so that the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
