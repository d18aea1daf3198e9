"""One module per `servewatch` command, each with `register(subparsers)`; here what they share: the parser's
opening (`add_command`) and, for a command that prints one text, `--out FILE` (`add_out_argument`, `write_out`)."""

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


def add_out_argument(parser: argparse.ArgumentParser) -> None:
    """`--out FILE`, for a command that prints one text: see `write_out`."""
    parser.add_argument("--out", metavar="FILE", help="write here instead of stdout")


def write_out(path: str | None, text: str) -> None:
    """`text` into --out's FILE, whole or not at all, or without --out to stdout."""
    if path:
        write_atomically(path, text)
    else:
        print(text, end="")


def write_atomically(path: str, text: str, flag: str = "--out") -> None:
    import os
    import tempfile

    from servewatch.errors import ServewatchError

    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".servewatch-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise ServewatchError(f"{flag}: cannot write {path}: {exc.strerror}") from None
