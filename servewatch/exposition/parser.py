"""Prometheus text 0.0.4 and OpenMetrics text, as vLLM and SGLang (prometheus_client) serve them.

One hand-written pass over the lines with str methods. With `families=`, a line is first judged by its
first few characters: lines that cannot concern the asked families (other families' samples, HELP and
TYPE lines) are skipped unread, so errors inside them go unreported; the rest is parsed exactly as in a
full parse, and the result equals the full parse restricted to those families. (When nothing is found,
the first sample line gets a full parse, so a body that is not an exposition still raises.)
"""

from __future__ import annotations

import re
from collections.abc import Collection
from itertools import islice

from servewatch.errors import BodyTooLarge, ExpositionError, TooManySeries
from servewatch.exposition.labels import MEMO_MAX_CHARS, _snippet, layout_builder, parse_labels, unescape_help
from servewatch.exposition.model import Family, Sample
from servewatch.exposition.names import KNOWN_TYPES, is_metric_name, line_prefixes, owning_family, sample_names_of

# A frozen dataclass's __init__ costs several times more than setting its slots directly, and building
# Samples is most of a parse; test_exposition checks that this builds the same Sample as Sample(...).
new_sample = object.__new__
set_name = Sample.name.__set__
set_labels = Sample.labels.__set__
set_value = Sample.value.__set__
set_timestamp = Sample.timestamp.__set__
SAMPLE_FIELDS = ("name", "labels", "value", "timestamp")

_BLANKS = " \t"

DEFAULT_MAX_BYTES = 16 * 2**20
DEFAULT_MAX_LINE_BYTES = 64 * 1024
DEFAULT_MAX_SERIES = 20_000          # one engine of vLLM 0.32 or SGLang 0.5.23 on CPU exposed 430-467 series

# A sample line is neither blank nor a comment. Later lines are found from the newline before them,
# which the regex engine scans for as a literal (several times faster than a multi-line `^`).
_FIRST_SAMPLE_LINE = re.compile(r"[ \t]*[^#\s]")
_LATER_SAMPLE_LINE = re.compile(r"\n[ \t]*[^#\s]")
_COUNT_LINES_UP_TO = 2**20          # bytes; counting all newlines is about 4x cheaper than the regex
_FIRST_SAMPLE_LINE_BYTES = re.compile(_FIRST_SAMPLE_LINE.pattern.encode())
_LATER_SAMPLE_LINE_BYTES = re.compile(_LATER_SAMPLE_LINE.pattern.encode())


def parse(text: str | bytes, families: Collection[str] | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES,
          max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, max_series: int | None = None,
          openmetrics: bool | None = None, origins: list | None = None) -> dict[str, Family]:
    """Families keyed by the name on their TYPE line (or the sample name for untyped samples).

    `families`: parse only these families. `max_series`: refuse a body with more sample lines than
    this, before parsing any (None: no bound). `openmetrics`: None detects the variant from a final
    `# EOF` (it decides whether timestamps are milliseconds (0.0.4) or seconds (OpenMetrics)).
    Raises BodyTooLarge and TooManySeries over the bounds, ExpositionError (naming the line) on bad structure.
    `origins`: a list that receives, for each sample returned (in the order they were read), its
    (line index in text.split("\n"), family, where its value starts in that line, or None when the line
    carried more than a lone value): what `exposition.layout` learns a scrape's layout from.
    """
    if isinstance(families, str):
        raise TypeError("families must be a collection of family names, not one str")
    text = bounded_text(text, max_bytes, max_series)
    lines = text.split("\n")
    _check_line_lengths(lines, max_line_bytes)
    if openmetrics is None:
        openmetrics = text[-256:].rstrip().endswith("# EOF")
    wanted = None if families is None else frozenset(families)
    return _parse_lines(lines, wanted, openmetrics, origins)


def check_series(text: str | bytes, max_series: int) -> None:
    """Raise TooManySeries when `text` holds more than `max_series` series (sample lines: neither blank
    nor a comment). The count stops at the first line over the bound: its cost follows the bound, not
    the size of the body. A small body with fewer lines than the bound is not counted line by line."""
    newline = b"\n" if isinstance(text, bytes) else "\n"
    if len(text) <= _COUNT_LINES_UP_TO and text.count(newline) < max_series:
        return
    first, later = (_FIRST_SAMPLE_LINE_BYTES, _LATER_SAMPLE_LINE_BYTES) if isinstance(text, bytes) \
        else (_FIRST_SAMPLE_LINE, _LATER_SAMPLE_LINE)
    allowed = max_series - (first.match(text) is not None)
    if allowed < 0:
        raise TooManySeries(f"more than {max_series:,} series (the series bound)", 1)
    over = next(islice(later.finditer(text), allowed, None), None)
    if over is not None:
        line_no = text.count(newline, 0, over.start()) + 2
        raise TooManySeries(f"more than {max_series:,} series (the series bound)", line_no)


def bounded_text(text: str | bytes, max_bytes: int, max_series: int | None = None) -> str:
    """`text` as str, checked in this order: BodyTooLarge over `max_bytes` (UTF-8 bytes), TooManySeries
    over `max_series` (None: no bound), ExpositionError when not UTF-8. A body over a bound is refused
    before it is decoded."""
    if isinstance(text, (bytearray, memoryview)):
        text = bytes(text)
    _check_size(text, max_bytes)
    if max_series is not None:
        check_series(text, max_series)
    if isinstance(text, str):
        return text
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError as error:
        line_no = text.count(b"\n", 0, error.start) + 1
        column = error.start - (text.rfind(b"\n", 0, error.start) + 1) + 1
        raise ExpositionError(
            f"not UTF-8 text (byte 0x{text[error.start]:02x} at column {column})", line_no) from None


def _check_size(text: str | bytes, max_bytes: int) -> None:
    size = len(text)
    if isinstance(text, bytes):
        if size > max_bytes:
            raise BodyTooLarge(f"body is {size} bytes, over the {max_bytes}-byte limit")
        return
    if size > max_bytes:      # a char is 1..4 UTF-8 bytes: too many chars is already too many bytes
        raise BodyTooLarge(f"body is at least {size} bytes, over the {max_bytes}-byte limit")
    if size * 4 > max_bytes and not text.isascii():  # measure the bytes only when it could matter
        size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise BodyTooLarge(f"body is {size} bytes, over the {max_bytes}-byte limit")


def _check_line_lengths(lines: list[str], max_line_bytes: int) -> None:
    quarter = max_line_bytes // 4
    if not lines or max(map(len, lines)) <= quarter:
        return
    for line_no, line in enumerate(lines, 1):
        if len(line) > quarter:
            size = len(line.encode("utf-8", "surrogatepass"))
            if size > max_line_bytes:
                raise BodyTooLarge(f"line is {size} bytes, over the {max_line_bytes}-byte line limit", line_no)


def _parse_lines(lines: list[str], wanted: frozenset[str] | None, openmetrics: bool,
                 origins: list | None = None) -> dict[str, Family]:
    out: dict[str, Family] = {}        # the families returned
    types: dict[str, str] = {}         # every family met so far -> its type
    typed: set[str] = set()            # families declared by a TYPE line
    helps: dict[str, str] = {}         # HELP text met before its family
    candidates = None if wanted is None else sample_names_of(wanted)
    untyped = "unknown" if openmetrics else "untyped"
    timestamp_divisor = 1.0 if openmetrics else 1000.0
    metric_names, label_names, layouts, heads_seen = _validated()
    last_heads: list[str] | None = None
    last_build = None
    last_name = None                   # the previous sample name, and its family (None: skipped)
    last_family: Family | None = None

    if wanted is not None:
        width, prefixes = line_prefixes(wanted)
    for line_no, line in enumerate(lines, 1):
        if not line:
            continue
        if wanted is not None and line[:width] not in prefixes and line[0] not in " \t":
            continue                       # cannot concern the families asked for
        first = line[0]
        if first in " \t\r":
            line = line.strip()
            if not line:
                continue
            first = line[0]
        if first == "#":
            last_name = None
            if not line.startswith("# TYPE ") and not line.startswith("# HELP "):
                if line == "# EOF" and openmetrics:
                    _check_nothing_after_eof(lines, line_no)
                    break
                if not line.startswith("#\t") and not line.startswith("#  "):
                    continue               # a plain comment
            keyword, name, rest = _comment_fields(line)
            if keyword == "TYPE":
                _check_metric_name(name, metric_names, "TYPE", line, line_no)
                _type_line(name, rest, line_no, wanted, out, types, typed, helps)
            elif keyword == "HELP" and (wanted is None or name in wanted):
                _check_metric_name(name, metric_names, "HELP", line, line_no)
                _help_line(name, rest, out, helps, openmetrics)
            continue

        # A sample line `head value` whose head (name and labels) an earlier parse already read: only
        # the value is new. Scrapes of one server repeat their heads, so this is most lines after the first.
        head_end = line.rfind(" ")
        head = line[:head_end] if head_end > 0 else None
        seen = heads_seen.get(head)
        if seen is not None:
            name, known_labels = seen
            tail = line[head_end:]
            if name != last_name:
                last_name = name
                last_family = None
                if candidates is not None and name not in candidates:
                    continue
                last_family = _family_of(name, line_no, wanted, out, types, helps, untyped)
            if last_family is None:
                continue
            try:
                value = float(tail)
            except ValueError:
                value = None
            if value is not None and "_" not in tail:
                sample = new_sample(Sample)
                set_name(sample, name)
                set_labels(sample, known_labels.copy())
                set_value(sample, value)
                set_timestamp(sample, None)
                last_family.samples.append(sample)
                if origins is not None:
                    origins.append((line_no - 1, last_family, head_end))
                continue
            last_name = None               # not a lone value: the full reading below says what it is

        brace = line.find("{")
        if brace != -1:
            name = line[:brace]
            space = -1
        else:
            brace, space, name = _split_name_slowly(line, line_no)

        if name != last_name:
            if brace != -1 and (" " in name or "\t" in name):
                brace, space, name = _split_name_slowly(line, line_no)
            last_name = name
            last_family = None
            if candidates is not None and name not in candidates:
                continue
            if name not in metric_names:
                if not is_metric_name(name):
                    raise ExpositionError(f"invalid metric name in {_snippet(line)}", line_no)
                if len(name) <= MEMO_MAX_CHARS:
                    metric_names.add(name)
            last_family = _family_of(name, line_no, wanted, out, types, helps, untyped)
        if last_family is None:
            continue

        if brace != -1:
            close = line.rfind("}")
            segment = line[brace + 1:close]
            parts = segment.split('"')
            build = None
            # Without a backslash, an even number of quotes delimits every value: the text outside
            # the quotes (the layout) is all that needs checking, and it repeats line after line.
            if len(parts) & 1 and close > brace and "\\" not in segment:
                heads = parts[0::2]
                if heads == last_heads:
                    build = last_build
                else:
                    layout = tuple(heads)
                    build = layouts.get(layout)
                    if build is None:
                        build = layout_builder(heads, label_names)
                        if build is not None and len(segment) <= _LAYOUT_MEMO_MAX_CHARS:
                            layouts[layout] = build
                    if build is not None:
                        last_heads, last_build = heads, build
            if build is not None:
                labels = build(parts)
            else:
                labels, close = parse_labels(line, brace + 1, line_no, label_names)
                close -= 1
            tail = line[close + 1:]
        else:
            labels = {}
            tail = line[space:]
        try:
            value = float(tail)           # the usual tail: a lone value (float() ignores the blanks)
            timestamp = None
        except ValueError:
            value, timestamp = _value_and_timestamp(tail, name, line, line_no, timestamp_divisor)
            if origins is not None:
                origins.append((line_no - 1, last_family, None))
        else:
            if origins is not None:
                origins.append((line_no - 1, last_family, len(line) - len(tail)))
            if "_" in tail:
                raise ExpositionError(f"non-numeric value {tail.strip()[:40]!r} for {name}", line_no)
            if head_end == len(line) - len(tail) and head_end <= _HEAD_MEMO_MAX_CHARS:
                heads_seen[head] = (name, labels.copy())
        sample = new_sample(Sample)
        set_name(sample, name)
        set_labels(sample, labels)
        set_value(sample, value)
        set_timestamp(sample, timestamp)
        last_family.samples.append(sample)
    if wanted is not None and not out:
        _check_first_sample_line(lines, openmetrics)
    return out


def _family_of(name: str, line_no: int, wanted: frozenset[str] | None, out: dict[str, Family],
               types: dict[str, str], helps: dict[str, str], untyped: str) -> Family | None:
    """The family a sample name starts (or continues), or None when it is not one of those returned.
    A name no declared family owns starts an untyped family of its own."""
    try:
        family_name = owning_family(name, types)
    except ValueError as error:
        raise ExpositionError(str(error), line_no) from None
    if family_name is None:
        family_name = name
        types[name] = untyped
        if wanted is None or name in wanted:
            out[name] = Family(name, untyped, helps.pop(name, ""), [])
    return out.get(family_name)


_VALIDATED_LIMIT = 4096              # entries, each at most a few KiB: a bounded memory cost
_HEADS_LIMIT = 8192                  # heads of up to 256 chars: a few MiB at most
_LAYOUT_MEMO_MAX_CHARS = 2048
_HEAD_MEMO_MAX_CHARS = 256
_METRIC_NAMES: set[str] = set()      # names found valid, kept across parses: scrapes of one server repeat
_LABEL_NAMES: set[str] = set()       # them, and reading them is a pure function of the string
_LAYOUTS: dict = {}                  # plain label layout -> its labels builder
_HEADS: dict = {}                    # sample head `name{labels}` (value cut off) -> (name, labels)


def _validated() -> tuple[set[str], set[str], dict, dict]:
    if len(_METRIC_NAMES) + len(_LABEL_NAMES) + len(_LAYOUTS) > _VALIDATED_LIMIT or len(_HEADS) > _HEADS_LIMIT:
        forget_memos()
    return _METRIC_NAMES, _LABEL_NAMES, _LAYOUTS, _HEADS


def forget_memos() -> None:
    """Forget every name, layout and sample head read so far (the next parse reads as the first one)."""
    _METRIC_NAMES.clear()
    _LABEL_NAMES.clear()
    _LAYOUTS.clear()
    _HEADS.clear()


def _check_first_sample_line(lines: list[str], openmetrics: bool) -> None:
    """When families= found nothing, make sure the body is an exposition at all: its first sample line
    gets a full parse (an HTML error page or a JSON body raises here instead of reading as an engine
    without metrics)."""
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped and stripped[0] != "#":
            _parse_lines([""] * index + [line], None, openmetrics)
            return


def _split_name_slowly(line: str, line_no: int) -> tuple[int, int, str]:
    """(index of '{' or -1, index of the blank after the name or -1, name) for lines that are not
    simply `name{labels} value`."""
    brace = line.find("{")
    space = min((i for i in (line.find(" "), line.find("\t")) if i != -1), default=-1)
    if brace != -1 and (space == -1 or brace < space):
        return brace, -1, line[:brace]
    if space == -1:
        raise ExpositionError(f"sample without a value: {_snippet(line)}", line_no)
    if brace != -1 and line[space:brace].strip():
        brace = -1                        # a '{' after the value belongs to an exemplar
    return brace, space, line[:space]


def _value_and_timestamp(tail: str, name: str, line: str, line_no: int,
                         divisor: float) -> tuple[float, float | None]:
    """The value and timestamp of a sample whose tail is not a lone value."""
    tokens = tail.split()
    if "#" in tokens:
        tokens = tokens[:tokens.index("#")]        # an exemplar follows: tolerated, not kept
    if not tokens:
        raise ExpositionError(f"sample without a value: {_snippet(line)}", line_no)
    if len(tokens) > 2:
        raise ExpositionError(f"unexpected text after the value: {_snippet(line)}", line_no)
    value = _number(tokens[0], "value", name, line_no)
    if len(tokens) == 1:
        return value, None
    return value, _number(tokens[1], "timestamp", name, line_no) / divisor


def _number(token: str, what: str, name: str, line_no: int) -> float:
    try:
        number = float(token)
    except ValueError:
        number = None
    if number is None or "_" in token:
        raise ExpositionError(f"non-numeric {what} {token[:40]!r} for {name}", line_no)
    return number


def _comment_fields(line: str) -> tuple[str, str, str]:
    """(keyword, name, rest) of a comment line; tokens are separated by blanks (space or tab) only."""
    if line[:2] == "# " and line[2:7] in ("TYPE ", "HELP ") and line[7:8] not in _BLANKS:   # the usual form
        end = line.find(" ", 8)
        name = line[7:end] if end != -1 else line[7:]
        if "\t" not in name:
            return line[2:6], name, line[end + 1:].lstrip(_BLANKS) if end != -1 else ""
    keyword, rest = _first_word(line[1:].lstrip(_BLANKS))
    name, rest = _first_word(rest)
    return keyword, name, rest


def _first_word(text: str) -> tuple[str, str]:
    end = len(text)
    for blank in _BLANKS:
        at = text.find(blank, 0, end)
        if at != -1:
            end = at
    return text[:end], text[end:].lstrip(_BLANKS)


def _check_metric_name(name: str, known: set[str], keyword: str, line: str, line_no: int) -> None:
    if name not in known:
        if not is_metric_name(name):
            raise ExpositionError(f"invalid metric name in {keyword} line: {_snippet(line)}", line_no)
        if len(name) <= MEMO_MAX_CHARS:
            known.add(name)


def _type_line(name: str, kind: str, line_no: int, wanted: frozenset[str] | None,
               out: dict[str, Family], types: dict[str, str], typed: set[str], helps: dict[str, str]) -> None:
    kind = kind.rstrip()
    if kind not in KNOWN_TYPES:
        raise ExpositionError(f"unknown type {kind[:40]!r} for {name}", line_no)
    if name in typed:
        raise ExpositionError(f"duplicate TYPE for {name}", line_no)
    if name in types:
        raise ExpositionError(f"TYPE for {name} after its samples", line_no)
    types[name] = kind
    typed.add(name)
    if wanted is None or name in wanted:
        out[name] = Family(name, kind, helps.pop(name, ""), [])


def _help_line(name: str, text: str, out: dict[str, Family], helps: dict[str, str], openmetrics: bool) -> None:
    text = unescape_help(text.rstrip(), openmetrics)
    family = out.get(name)
    if family is not None:
        family.help = text
    else:
        helps[name] = text


def _check_nothing_after_eof(lines: list[str], eof_line_no: int) -> None:
    for line_no in range(eof_line_no, len(lines)):
        if lines[line_no].strip():
            raise ExpositionError("text after '# EOF'", line_no + 1)
