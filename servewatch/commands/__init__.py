"""One module per `servewatch` command; here what they share: the parser's opening (`add_command`, from the
command module's declaration) and, for a command that prints one text, `--out FILE` (`add_out_argument`,
`write_out`).

A command module declares `HELP` (its line in the command list), `DESCRIPTION` (heads its own --help), `run(args)`
where the command itself runs (a module without one runs an action under it), `PARSER_OPTIONS` where argparse
needs more (usage, epilog, formatter_class, a filled description), and `arguments(parser)`, which adds its flags.
Its name is its module's, with "-" for "_" (gpu_check: `servewatch gpu-check`)."""

from __future__ import annotations

import argparse
from types import ModuleType


def add_command(subparsers: argparse._SubParsersAction, module: ModuleType) -> argparse.ArgumentParser:
    """Add `servewatch NAME` as `module` declares it (see above)."""
    options = {"description": module.DESCRIPTION, **getattr(module, "PARSER_OPTIONS", {})}
    parser = subparsers.add_parser(module.__name__.rpartition(".")[2].replace("_", "-"), help=module.HELP, **options)
    run = getattr(module, "run", None)
    if run is not None:
        parser.set_defaults(func=run)
    module.arguments(parser)
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
