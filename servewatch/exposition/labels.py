"""The `{name="value",...}` part of a sample line, and the escapes of label values and HELP text."""

from __future__ import annotations

from collections.abc import Callable

from servewatch.errors import ExpositionError
from servewatch.exposition.names import is_label_name

MEMO_MAX_CHARS = 256      # longer names are validated every time rather than remembered

_LABEL_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def parse_labels(line: str, start: int, line_no: int, known_names: set[str]) -> tuple[dict[str, str], int]:
    """Labels from `line[start:]` (just after `{`); returns them and the index just after `}`.

    `known_names` caches label names already validated during this parse.
    """
    labels: dict[str, str] = {}
    i = start
    try:
        while True:
            while line[i] == " ":
                i += 1
            if line[i] == "}":
                return labels, i + 1
            eq = line.find("=", i)
            if eq == -1:
                raise ExpositionError(f"label without '=' in {_snippet(line)}", line_no)
            name = line[i:eq]
            if name not in known_names:
                name = name.rstrip(" ")
                if not is_label_name(name):
                    raise ExpositionError(f"invalid label name {name!r} in {_snippet(line)}", line_no)
                if len(name) <= MEMO_MAX_CHARS:
                    known_names.add(name)
            j = eq + 1
            while line[j] == " ":
                j += 1
            if line[j] != '"':
                raise ExpositionError(f"label {name} value is not quoted in {_snippet(line)}", line_no)
            close = line.find('"', j + 1)
            if close == -1:
                raise ExpositionError(f"unterminated label value in {_snippet(line)}", line_no)
            if line.find("\\", j + 1, close) == -1:
                value = line[j + 1:close]
            else:
                value, close = _unescape_label_value(line, j + 1, line_no)
            if name in labels:
                raise ExpositionError(f"duplicate label {name} in {_snippet(line)}", line_no)
            labels[name] = value
            i = close + 1
            while line[i] == " ":
                i += 1
            separator = line[i]
            if separator == ",":
                i += 1
            elif separator != "}":
                raise ExpositionError(f"expected ',' or '}}' after label {name} in {_snippet(line)}", line_no)
    except IndexError:
        raise ExpositionError(f"unterminated label set in {_snippet(line)}", line_no) from None


def layout_builder(heads: list[str], known_names: set[str]) -> Callable[[list[str]], dict[str, str]] | None:
    """For a label segment without backslashes and with an even number of quotes, split on quotes,
    `heads` = parts[0::2]: everything outside the quotes (`name=`, `,name=`, ..., and a tail '' or ',').
    Returns a function from the
    split parts to the labels dict when that layout is valid, else None (the careful parser decides).

    Without backslashes every quote is a delimiter, so the layout alone says whether the segment is
    well formed; lines of one family share it, so callers cache builders by layout.
    """
    if len(heads) == 1:
        return _no_labels if not heads[0] else None
    if heads[-1] not in ("", ","):
        return None
    names: list[str] = []
    for index, head in enumerate(heads[:-1]):
        if not head.endswith("=") or (index and not head.startswith(",")):
            return None
        name = head[1 if index else 0:-1]
        if name not in known_names:
            if not is_label_name(name):
                return None
            if len(name) <= MEMO_MAX_CHARS:
                known_names.add(name)
        names.append(name)
    if len(set(names)) != len(names):
        return None
    return _dict_builder(tuple(names))


def _no_labels(parts: list[str]) -> dict[str, str]:
    return {}


def _dict_builder(names: tuple[str, ...]) -> Callable[[list[str]], dict[str, str]]:
    """A function from split parts (values at odd indexes) to the labels dict; dict displays for the
    common small label sets are several times cheaper than dict(zip(...))."""
    if len(names) == 1:
        (a,) = names
        return lambda parts: {a: parts[1]}
    if len(names) == 2:
        a, b = names
        return lambda parts: {a: parts[1], b: parts[3]}
    if len(names) == 3:
        a, b, c = names
        return lambda parts: {a: parts[1], b: parts[3], c: parts[5]}
    if len(names) == 4:
        a, b, c, d = names
        return lambda parts: {a: parts[1], b: parts[3], c: parts[5], d: parts[7]}
    return lambda parts: dict(zip(names, parts[1::2]))


def _unescape_label_value(line: str, start: int, line_no: int) -> tuple[str, int]:
    """A label value holding backslashes; returns it and the index of its closing quote.

    Each search covers new text only (the next quote is searched again only once an escape used it),
    so a line full of backslashes costs linear time.
    """
    pieces: list[str] = []
    i = start
    quote = line.find('"', i)
    while True:
        if quote == -1:
            raise ExpositionError(f"unterminated label value in {_snippet(line)}", line_no)
        backslash = line.find("\\", i, quote)
        if backslash == -1:
            pieces.append(line[i:quote])
            return "".join(pieces), quote
        pieces.append(line[i:backslash])
        escaped = _LABEL_ESCAPES.get(line[backslash + 1])      # backslash + 1 <= quote: in range
        if escaped is None:
            raise ExpositionError(
                f"bad escape '\\{line[backslash + 1]}' in label value in {_snippet(line)}", line_no)
        pieces.append(escaped)
        i = backslash + 2
        if i > quote:                                           # that quote was escaped
            quote = line.find('"', i)


def unescape_help(text: str, openmetrics: bool) -> str:
    r"""HELP text: `\\` and `\n` are escapes (and `\"` in OpenMetrics); other backslashes stay as written."""
    if "\\" not in text:
        return text
    pieces: list[str] = []
    i = 0
    while True:
        backslash = text.find("\\", i)
        if backslash == -1 or backslash + 1 >= len(text):
            pieces.append(text[i:])
            return "".join(pieces)
        pieces.append(text[i:backslash])
        follower = text[backslash + 1]
        if follower == "\\":
            pieces.append("\\")
        elif follower == "n":
            pieces.append("\n")
        elif follower == '"' and openmetrics:
            pieces.append('"')
        else:
            pieces.append(text[backslash:backslash + 2])
        i = backslash + 2


def _snippet(line: str, limit: int = 80) -> str:
    return repr(line if len(line) <= limit else line[:limit] + "…")
