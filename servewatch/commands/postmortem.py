"""`servewatch postmortem LOG...`: read a dead server's log like a medical record."""

from __future__ import annotations

import argparse
import sys

from servewatch.table import WIDE_HELP

HELP = "read a dead inference server's log: timeline, last words, culprit, safe action"
DESCRIPTION = ("Read an inference server's log, by the grammar of each engine servewatch knows (ANSI colour, "
               "interleaved process prefixes, year-less stamps, a C++ server's time since its start, rotated and "
               "gzipped parts) and print the stats timeline, the startup stages, how the "
               "server died, the arithmetic that tests each suspect of an allocation failure against the "
               "bytes requested, and the safe actions with their rollback. Exit 0 with a full conclusion, 1 "
               "when it is partial (the missing piece is said on stderr), 2 when the input cannot be read.")


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logs", metavar="LOG", nargs="+",
                        help="the log file; give rotated parts too (server.log.1, server.log.2.gz), any order")
    parser.add_argument("--model-config", metavar="CONFIG_JSON",
                        help="the model's config.json: its vocab_size (and KV shape) for the arithmetic")
    parser.add_argument("--vocab-size", type=int, metavar="N", help="the vocabulary size, when there is no config")
    parser.add_argument("--json", action="store_true", help="print the postmortem as JSON on stdout")
    parser.add_argument("--wide", action="store_true", help=WIDE_HELP)
    parser.add_argument("--html", metavar="FILE", help="also write a single offline HTML page with the chart")


def run(args: argparse.Namespace) -> int:
    import json

    from servewatch.doctor.log_files import read_lines
    from servewatch.doctor.log_record import read_record
    from servewatch.doctor.postmortem import postmortem
    from servewatch.doctor.postmortem_report import print_text, render_html, to_dict
    from servewatch.errors import ServewatchError

    shape, vocab, source, notes = None, None, None, []
    if args.vocab_size is not None:
        if args.vocab_size <= 0:
            raise ServewatchError(f"--vocab-size {args.vocab_size}: must be a positive number of tokens")
        vocab, source = args.vocab_size, "--vocab-size"
    if args.model_config:
        shape = _model_shape(args.model_config)
        if vocab is None and shape.vocab_size is not None:
            vocab, source = shape.vocab_size, "config.json vocab_size"
        if shape.vocab_size is None:
            notes.append(f"--model-config {args.model_config}: no vocab_size in it")
    record = read_record(read_lines(args.logs))
    if record.recognised == 0 or record.dialect is None:
        from servewatch import dialects

        titles = [d.title or d.name for d in dialects.registered()]
        engines = " or ".join(filter(None, (", ".join(titles[:-1]), titles[-1])))
        raise ServewatchError(f"{', '.join(args.logs)}: no {engines} line in {record.lines:,} lines: not an "
                              f"engine log, nothing to conclude")
    pm = postmortem(record, shape, vocab_size=vocab, vocab_source=source)
    if args.json:
        json.dump(to_dict(pm), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_text(pm, wide=args.wide)
    if args.html:
        try:
            with open(args.html, "w", encoding="utf-8") as f:
                f.write(render_html(pm))
        except OSError as exc:
            raise ServewatchError(f"--html {args.html}: {exc.strerror or exc}") from None
    for note in notes + pm.partial:
        print(f"servewatch postmortem: partial: {note}", file=sys.stderr)
    return 1 if pm.partial else 0


def _model_shape(path: str):
    import json

    from servewatch.doctor.model_config import model_shape
    from servewatch.errors import ServewatchError

    try:
        with open(path, "rb") as f:
            data = f.read(4 * 2**20 + 1)
    except OSError as exc:
        raise ServewatchError(f"--model-config {path}: {exc.strerror or exc}") from None
    if len(data) > 4 * 2**20:
        raise ServewatchError(f"--model-config {path}: larger than 4 MiB, not a config.json")
    try:
        config = json.loads(data)
    except UnicodeDecodeError:      # a ValueError too, whose words are the codec's
        raise ServewatchError(f"--model-config {path}: not JSON (not UTF-8 text)") from None
    except ValueError as exc:
        raise ServewatchError(f"--model-config {path}: not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ServewatchError(f"--model-config {path}: not a JSON object")
    return model_shape(config)
