"""Reading a scrape whose layout repeats: consecutive scrapes of one server are the same text except for
their sample values, so once a scrape has been parsed, the next one is checked against it piece by piece
(C-speed `startswith`) and only the values of the asked-for samples are read.

A `Layout` is learned from one text and the full parse of it (`parse(..., origins=)`): the text cut at
the value of every sample line into constant pieces. A later text is read through the layout only when
every constant piece is found again where expected, each asked-for value is a lone number, and the
variant (0.0.4 / OpenMetrics) and the line bound are unchanged; the families are then exactly what
`parse(text, families)` returns (the same names, types, help, labels and values), because everything
`parse` reads from the other lines is in the constant pieces. Anything else (a new series, a timestamp,
a malformed value) is not read here: `RepeatingParser` parses it in full, with the full parse's errors.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection
from dataclasses import dataclass, field

from servewatch.interning import Interner
from servewatch.exposition.model import Family, Sample
from servewatch.exposition.parser import (DEFAULT_MAX_BYTES, DEFAULT_MAX_LINE_BYTES, bounded_text, new_sample, parse,
                                          set_labels, set_name, set_timestamp, set_value)


@dataclass(frozen=True, slots=True)
class Layout:
    pieces: tuple[str, ...]           # the constant text before each sample line's value
    tail: str                         # the constant text after the last value
    sizes: tuple[int, ...]            # len() of each piece
    slots: tuple[bool, ...]           # for each value: whether it is a kept sample's
    families: tuple[tuple[str, str, str, int], ...]   # (name, type, help, how many samples), in parse order
    samples: tuple[tuple[str, dict[str, str]], ...]   # (name, labels) of each sample kept, family by family
    order: tuple[int, ...]            # the kept values (in text order) rearranged family by family
    openmetrics: bool
    longest_line: int                 # characters of the longest constant line part
    serial: int = field(default_factory=itertools.count().__next__, compare=False)   # names its families' shape
    in_order: bool = False            # `order` keeps the text order (each family's samples are together in the text)
    ascii: bool = False               # every piece and the tail are ASCII (the compiled read takes only such)

    @classmethod
    def learn(cls, text: str, families: dict[str, Family], origins: list) -> Layout | None:
        """The layout of `text`, given its parse and the parse's `origins`; None when a kept sample line
        carries more than a lone value (a timestamp, an exemplar) or a sample line starts with a blank."""
        if not families:
            return None
        lines = text.split("\n")
        order = {id(family): i for i, family in enumerate(families.values())}
        first_index, at = [], 0
        for family in families.values():
            first_index.append(at)
            at += len(family.samples)
        seen_in = [0] * len(families)
        kept: dict[int, tuple[int, int]] = {}          # line index -> (sample index, value column)
        for line_index, family, column in origins:
            if column is None:
                return None
            i = order[id(family)]
            kept[line_index] = (first_index[i] + seen_in[i], column)
            seen_in[i] += 1
        pieces: list[str] = []
        slots: list[int] = []
        constant: list[str] = []
        longest = 0
        for line_index, line in enumerate(lines):
            if line_index:
                constant.append("\n")
            if not line or line[0] == "#":
                constant.append(line)
                longest = max(longest, len(line))
                continue
            if line[0] in " \t\r":
                if line.strip():
                    return None
                constant.append(line)
                continue
            sample_at = kept.get(line_index)
            if sample_at is not None:
                index, column = sample_at
                while column < len(line) and line[column] in " \t":   # the blanks before the value stay
                    column += 1                                         # constant: they end the name
            else:
                index, column = -1, line.rfind(" ") + 1
                if column == 0:                 # no value at all: a line `parse` skipped unread
                    constant.append(line)
                    longest = max(longest, len(line))
                    continue
            constant.append(line[:column])
            longest = max(longest, column)
            pieces.append("".join(constant))
            constant = []
            slots.append(index)
        in_text_order = [slot for slot in slots if slot >= 0]
        if len(in_text_order) != len(kept) or len(kept) != at:
            return None
        position_of = {index: position for position, index in enumerate(in_text_order)}
        samples = tuple((s.name, s.labels) for family in families.values() for s in family.samples)
        order = tuple(position_of[index] for index in range(at))
        return cls(pieces=tuple(pieces), sizes=tuple(map(len, pieces)), tail="".join(constant),
                   slots=tuple(slot >= 0 for slot in slots), order=order, in_order=order == tuple(range(at)),
                   families=tuple((f.name, f.type, f.help, len(f.samples)) for f in families.values()),
                   samples=samples, openmetrics=text[-256:].rstrip().endswith("# EOF"), longest_line=longest,
                   ascii=all(piece.isascii() for piece in pieces) and "".join(constant).isascii())

    def read(self, text: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> dict[str, Family] | None:
        """The families of `text` when it has this layout (equal to a full parse of it), else None."""
        variable = len(text) - self.constant_chars
        if variable < 0 or self.longest_line + variable > max_line_bytes // 4:
            return None                   # a line could be over the line bound: the full parse decides
        if _compiled is not None and self.ascii and text.isascii():
            values = _compiled.values(text, self.pieces, self.slots, self.tail)
            if values is None or text[-256:].rstrip().endswith("# EOF") != self.openmetrics:
                return None
            if not self.in_order:
                values = [values[position] for position in self.order]
        else:
            values = self._values(text)
            if values is None:
                return None
        out: dict[str, Family] = {}
        at = 0
        for (name, kind, help_text, count), heads in zip(self.families, self.heads):
            out[name] = LaidOutFamily(name, kind, help_text, heads, values[at:at + count], (self.serial, at))
            at += count
        return out

    @property
    def heads(self) -> tuple[tuple[tuple[str, dict[str, str]], ...], ...]:
        """`samples` cut family by family."""
        def cut() -> tuple:
            heads, at = [], 0
            for *_, count in self.families:
                heads.append(self.samples[at:at + count])
                at += count
            return tuple(heads)

        return _HEADS.made(self.serial, cut)

    def _values(self, text: str) -> list[float] | None:
        """The kept samples' values, family by family, read in Python (what the compiled read gives)."""
        tokens = self._tokens(text)
        if tokens is None or text[-256:].rstrip().endswith("# EOF") != self.openmetrics:
            return None
        try:
            values = list(map(float, tokens)) if self.in_order else [float(tokens[position]) for position in self.order]
        except ValueError:
            return None
        if "_" in "".join(tokens):
            return None
        return values

    def _tokens(self, text: str) -> list[str] | tuple[str, ...] | None:
        """The kept samples' value texts, in text order, when every constant piece is where expected."""
        matcher = _matcher(self)
        if matcher is not None:
            found = matcher.match(text)
            return found.groups() if found is not None else None
        tokens: list[str] = []
        keep = tokens.append
        startswith, find = text.startswith, text.find
        position = 0
        for piece, size, slot in zip(self.pieces, self.sizes, self.slots):
            if not startswith(piece, position):
                return None
            position += size
            end = find("\n", position)
            if end == -1:
                end = len(text)
            if slot:
                keep(text[position:end])
            position = end
        return tokens if text[position:] == self.tail else None

    @property
    def constant_chars(self) -> int:
        return sum(self.sizes) + len(self.tail)

# A layout read this many times gets a compiled matcher: one regular expression of its pieces, matched
# in C (0.07 ms against 0.15 ms for the piece-by-piece loop on a 51 kB vLLM scrape; compiling it takes
# ~60 ms, so only a layout that keeps being read is worth it).
COMPILE_AFTER = 200
_READS: dict[int, int] = {}
_MATCHERS: Interner[re.Pattern] = Interner(kept=64)


def _matcher(layout: Layout) -> re.Pattern | None:
    reads = _READS.get(layout.serial, 0) + 1
    if reads < COMPILE_AFTER:
        if len(_READS) >= 4096:
            _READS.clear()
        _READS[layout.serial] = reads
        return None
    return _MATCHERS.made(layout.serial, lambda: compile_matcher(layout))


def compile_matcher(layout: Layout) -> re.Pattern:
    """The layout as one anchored pattern: each piece literally, then the rest of its line (captured for
    a kept sample's value; possessive, so a mismatch never backtracks into a value)."""
    parts = [r"\A"]
    for piece, slot in zip(layout.pieces, layout.slots):
        parts.append(re.escape(piece))
        parts.append(r"([^\n]*+)" if slot else r"[^\n]*+")
    parts.append(re.escape(layout.tail) + r"\Z")
    return re.compile("".join(parts))


_HEADS: Interner[tuple] = Interner(kept=1024)

# The layout read compiled (servewatch/exposition/_layout.c: the pieces compared and the values converted in one C
# call) where setup.py built it; the pure-Python read (Layout._values) where not, and for a text that is not ASCII.
try:
    from servewatch.exposition import _layout as _compiled
except ImportError:
    _compiled = None


class LaidOutFamily(Family):
    """A family read through a layout: its values are at hand, its Sample objects made when first asked
    for (a dialect reading a histogram through its plan needs only the values)."""

    __slots__ = ("_heads", "_values", "_built")

    def __init__(self, name: str, kind: str, help_text: str, heads, values: list[float], shape):
        Family.name.__set__(self, name)
        Family.type.__set__(self, kind)
        Family.help.__set__(self, help_text)
        Family.shape.__set__(self, shape)
        self._heads, self._values, self._built = heads, values, None

    @property
    def samples(self) -> list[Sample]:
        built = self._built
        if built is None:
            built = self._built = []
            for (sample_name, labels), value in zip(self._heads, self._values):
                sample = new_sample(Sample)
                set_name(sample, sample_name)
                set_labels(sample, labels.copy())
                set_value(sample, value)
                set_timestamp(sample, None)
                built.append(sample)
        return built

    @property
    def values(self) -> list[float]:
        return self._values

    def __eq__(self, other):
        if not isinstance(other, Family):
            return NotImplemented
        return (self.name, self.type, self.help, self.samples) == (other.name, other.type, other.help, other.samples)

    __hash__ = None


class RepeatingParser:
    """`parse(text, families)` for one server's successive scrapes: through the layout of the previous
    scrape when the text still has it, else in full (learning the new layout)."""

    def __init__(self):
        self.layout: Layout | None = None
        self.wanted: frozenset[str] | None = None
        self.fast_reads = 0
        self.full_reads = 0

    def parse(self, text: str | bytes, families: Collection[str], *, max_bytes: int = DEFAULT_MAX_BYTES,
              max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> dict[str, Family]:
        text = bounded_text(text, max_bytes)
        wanted = frozenset(families)
        if self.layout is not None and wanted == self.wanted:
            found = self.layout.read(text, max_line_bytes)
            if found is not None:
                self.fast_reads += 1
                return found
        origins: list = []
        found = parse(text, wanted, max_bytes=max_bytes, max_line_bytes=max_line_bytes, origins=origins)
        self.full_reads += 1
        self.layout, self.wanted = shared(Layout.learn(text, found, origins), wanted), wanted
        return found


_SHARED: Interner[Layout] = Interner(kept=256)


def shared(layout: Layout | None, wanted: frozenset[str]) -> Layout | None:
    """One object for equal layouts: the replicas of a fleet serve the same layout, and a layout holds
    the constant text of a whole scrape (its pieces decide the rest: the families are read from them)."""
    if layout is None:
        return None
    return _SHARED.get((wanted, layout.pieces, layout.tail, layout.slots, layout.openmetrics), layout)
