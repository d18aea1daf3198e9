"""One module per `servewatch` command, each with `register(subparsers)`; `add_command` is the opening they share."""

from __future__ import annotations

import argparse
from typing import Any, Callable


def add_command(subparsers: argparse._SubParsersAction, name: str, help: str, description: str,
                func: Callable[[argparse.Namespace], Any] | None = None, **options: Any) -> argparse.ArgumentParser:
    """Add `servewatch NAME`: `help` is its line in the command list, `description` heads its own --help,
    `func` (where the command itself runs, not an action under it) becomes `args.func`; `options` (usage,
    epilog, formatter_class) go to argparse as they are."""
    parser = subparsers.add_parser(name, help=help, description=description, **options)
    if func is not None:
        parser.set_defaults(func=func)
    return parser
