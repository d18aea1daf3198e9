"""The `{name="value",...}` part of a sample line, and the escapes of label values and HELP text."""

from __future__ import annotations

from servewatch.errors import ExpositionError
from servewatch.exposition.names import is_label_name

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


def plain_labels(segment: str, shapes: dict[tuple[str, ...], tuple[str, ...]],
                 known_names: set[str]) -> dict[str, str] | None:
    """Labels from the text between `{` and `}` when it holds no backslash, else None.

    Without backslashes every quote is a delimiter, so one split yields the `,name=` heads and the
    values. `shapes` caches validated heads -> label names (lines of one family share them). Anything
    unusual (spaces, unknown names, duplicates, a stray quote) returns None: the careful parser decides.
    """
    if "\\" in segment:
        return None
    parts = ("," + segment).split('"')
    if len(parts) == 1:
        return {} if not segment else None
    if not len(parts) & 1:
        return None
    tail = parts[-1]
    if tail and tail != ",":
        return None
    heads = tuple(parts[0:-1:2])
    names = shapes.get(heads)
    if names is None:
        names = tuple(head[1:-1] for head in heads)
        for head, name in zip(heads, names):
            if name not in known_names or head[0] != "," or head[-1] != "=":
                return None
        if len(set(names)) != len(names):
            return None
        shapes[heads] = names
    return dict(zip(names, parts[1::2]))


def _unescape_label_value(line: str, start: int, line_no: int) -> tuple[str, int]:
    """A label value holding backslashes; returns it and the index of its closing quote."""
    pieces: list[str] = []
    i = start
    while True:
        quote = line.find('"', i)
        backslash = line.find("\\", i)
        if backslash != -1 and (quote == -1 or backslash < quote):
            pieces.append(line[i:backslash])
            if backslash + 1 >= len(line):
                raise ExpositionError(f"unterminated label value in {_snippet(line)}", line_no)
            escaped = _LABEL_ESCAPES.get(line[backslash + 1])
            if escaped is None:
                raise ExpositionError(
                    f"bad escape '\\{line[backslash + 1]}' in label value in {_snippet(line)}", line_no)
            pieces.append(escaped)
            i = backslash + 2
        elif quote == -1:
            raise ExpositionError(f"unterminated label value in {_snippet(line)}", line_no)
        else:
            pieces.append(line[i:quote])
            return "".join(pieces), quote


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
