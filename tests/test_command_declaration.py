"""A command is declared, not registered by hand (issue 51 item 6): each module in servewatch.commands states its
HELP, DESCRIPTION, `arguments(parser)` and (where the command itself runs) `run(args)`, and one function,
servewatch.commands.add_command, opens every parser from them: the name from the module's, the help line, the
description (or PARSER_OPTIONS' filled one) and `args.func`."""

from __future__ import annotations

import argparse
import importlib
import types

from servewatch.cli import COMMANDS, build_parser
from servewatch.commands import add_command


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_command_is_opened_from_its_declaration():
    commands = _subparsers(build_parser())
    assert sorted(commands) == sorted(name.replace("_", "-") for name in COMMANDS)
    for name in COMMANDS:
        module = importlib.import_module(f"servewatch.commands.{name}")
        assert not hasattr(module, "register"), name
        parser = commands[name.replace("_", "-")]
        options = getattr(module, "PARSER_OPTIONS", {})
        assert parser.description == options.get("description", module.DESCRIPTION), name
        assert parser.get_default("func") is getattr(module, "run", None), name


def test_add_command_reads_a_toy_declaration():
    toy = types.ModuleType("servewatch.commands.toy_thing")
    toy.HELP, toy.DESCRIPTION = "a toy", "A toy command."
    toy.PARSER_OPTIONS = {"epilog": "the end"}
    toy.run = lambda args: 0
    toy.arguments = lambda parser: parser.add_argument("--level", type=int, default=3)
    parser = argparse.ArgumentParser(prog="servewatch")
    sub = add_command(parser.add_subparsers(dest="command"), toy)
    assert (sub.prog, sub.description, sub.epilog) == ("servewatch toy-thing", "A toy command.", "the end")
    args = parser.parse_args(["toy-thing", "--level", "5"])
    assert (args.command, args.level, args.func) == ("toy-thing", 5, toy.run)
    assert parser.parse_args(["toy-thing"]).level == 3


def test_a_command_line_opens_only_the_parser_of_the_command_it_names():
    """`servewatch verify ...` opens verify's parser alone, the same one the whole parser holds (each other command's
    module costs its imports: 0.4 to 0.9 s for the recorder's commands); the root's --help and --version, an unknown
    word, a misspelt name and `completion` (which writes every command's script) open every command's."""
    from servewatch import cli

    assert cli.chosen_command(["verify", "x"]) == "verify"
    assert cli.chosen_command(["gpu-check"]) == "gpu_check"
    assert cli.chosen_command(["gpu_check"]) is None            # not its name: the whole parser says which is
    assert [cli.chosen_command(argv) for argv in ([], ["--help"], ["--version"], ["nosuch"], ["completion", "bash"])] \
        == [None] * 5
    alone, whole = _subparsers(build_parser("guard")), _subparsers(build_parser())
    assert list(alone) == ["guard"]
    assert alone["guard"].format_help() == whole["guard"].format_help()
