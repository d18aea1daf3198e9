"""One renderer for every table servewatch prints, fitted to the terminal it is printed on.

rich (already a dependency: the live view, progress bars) draws the table. What rich does not decide is what
to give up when a table is wider than the terminal: left to itself it squeezes every column, and a header
comes out in fragments ("toke", "o") while whole columns vanish without a word. So here each column declares
how much it matters (`Column.priority`), and a table is printed like this:

- its width limit is the terminal's (`shutil.get_terminal_size`: the `COLUMNS` variable, else the terminal,
  else 80 when piped), or none with `--wide`;
- columns are left out, least important first (the rightmost first among equals), until the rest fit at
  their natural width: a header is never cut, and a column that cannot show its header whole is not shown;
- a column declared `shrink` (a name: a model, an engine, a check) may narrow down to its `min_width`, its
  long cells ellipsised with "…" or folded onto more lines at spaces: a folded column is never narrower than
  its longest word, so that a name (`requests_aborted`) is never cut in two; the widths are set here, not
  left to rich (which would fold a word to make room);
- a line under the table names the columns left out and says that `--wide` shows them.

Kept small and on rich alone, not another table library: rich already renders every table and the live
view; what was missing is only the choice of columns, about a hundred lines. The ground floor of the layers
(no servewatch imports), so that every command and report can use it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Any

ALWAYS = 1_000          # a column of this priority is never left out (a table's first, naming column)
WIDE_WIDTH = 100_000    # "no width limit": wider than any table servewatch prints
WIDE_HELP = "print tables whole, however wide (without it, columns that do not fit the terminal are left out)"


def terminal_width() -> int:
    """The width tables are fitted to: COLUMNS, else the terminal's, else 80 (piped)."""
    return shutil.get_terminal_size((80, 24)).columns


def console(wide: bool = False, **options: Any):
    """A rich Console as wide as the terminal (`terminal_width`), or without a width limit with `wide`;
    `options` go to rich (file, markup, highlight, stderr...)."""
    from rich.console import Console

    return Console(width=WIDE_WIDTH if wide else terminal_width(), **options)


@dataclass(frozen=True)
class Column:
    header: str                     # may hold "\n": a header on two lines, each kept whole
    priority: int = 10              # higher is kept longer; ALWAYS is never left out
    justify: str = "right"
    shrink: str | None = None       # "ellipsis" or "fold": may narrow to min_width; None: never narrower
    min_width: int = 12             # with shrink: the narrowest it becomes (never under its header's words)
    style: str | None = None
    name: str | None = None         # how the left-out line names it (default: its header on one line)
    ratio: int | None = None        # in a table that fills the terminal (expand): its share of the width

    def said(self) -> str:
        return self.name or " ".join(self.header.split()) or "(unnamed)"


@dataclass
class Table:
    """A table to print: its columns, its rows and rich's Table options (title, box, show_header...); a
    caption is printed as a line under the table, wrapped at the terminal's width, not the table's."""

    columns: list[Column]
    options: dict[str, Any] = field(default_factory=dict)
    rows: list[tuple[list[Any], bool]] = field(default_factory=list)

    def add_row(self, *cells: Any, end_section: bool = False) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.columns)} columns")
        self.rows.append((list(cells), end_section))


def _width_of(console, cell: Any) -> int:
    from rich.cells import cell_len
    from rich.text import Text

    text = console.render_str(cell) if isinstance(cell, str) else cell
    if not isinstance(text, Text):
        from rich.measure import Measurement

        return Measurement.get(console, console.options.update_width(WIDE_WIDTH), text).maximum
    return max((cell_len(line) for line in text.plain.split("\n")), default=0)


def _longest_word(console, cell: Any) -> int:
    from rich.cells import cell_len
    from rich.text import Text

    text = console.render_str(cell) if isinstance(cell, str) else cell
    if not isinstance(text, Text):
        return 0
    return max((cell_len(word) for word in text.plain.split()), default=0)


def _rich_table(table: Table, keep: list[int], *, expand: bool, widths: dict[int, int] | None = None,
                floors: dict[int, int] | None = None):
    from rich.table import Table as RichTable

    options = {k: v for k, v in table.options.items() if k not in ("caption", "caption_justify")}
    options["expand"] = expand
    out = RichTable(**options)
    for i in keep:
        col = table.columns[i]
        out.add_column(col.header, justify=col.justify, style=col.style, no_wrap=col.shrink is None,
                       overflow=col.shrink or "fold", ratio=col.ratio if expand else None,
                       width=(widths or {}).get(i), min_width=(floors or {}).get(i))
    for cells, end_section in table.rows:
        out.add_row(*(cells[i] for i in keep), end_section=end_section)
    return out


def fit(console, table: Table, width: int) -> tuple[Any, list[Column]]:
    """The rich Table to print within `width` columns, and the columns left out (least important first)."""
    from rich.measure import Measurement

    natural = [max([_width_of(console, part) for part in col.header.split("\n")]
                   + [_width_of(console, cells[i]) for cells, _ in table.rows]) for i, col in enumerate(table.columns)]
    floor = [natural[i] if col.shrink is None else
             min(natural[i], max([col.min_width] + [_width_of(console, w) for w in col.header.split()]
                                 + ([_longest_word(console, cells[i]) for cells, _ in table.rows]
                                    if col.shrink == "fold" else [])))
             for i, col in enumerate(table.columns)]
    keep = list(range(len(table.columns)))
    left_out: list[Column] = []
    wide_options = console.options.update_width(WIDE_WIDTH)
    while True:
        whole = Measurement.get(console, wide_options, _rich_table(table, keep, expand=False)).maximum
        needed = whole - sum(natural[i] - floor[i] for i in keep)
        droppable = [i for i in keep if table.columns[i].priority < ALWAYS]
        if needed <= width or not droppable:
            break
        least = min(droppable, key=lambda i: (table.columns[i].priority, -i))
        keep.remove(least)
        left_out.append(table.columns[least])
    expand = bool(table.options.get("expand")) and width < WIDE_WIDTH
    shrunk = [i for i in keep if natural[i] > floor[i]]
    if expand or needed + sum(natural[i] - floor[i] for i in shrunk) <= width or not shrunk:
        return _rich_table(table, keep, expand=expand, floors={i: floor[i] for i in shrunk}), left_out
    # Too wide at the natural widths: the widest shrinking column narrowed a column at a time, as rich narrows,
    # but never under its floor (rich alone would fold a word to make room).
    widths = {i: natural[i] for i in shrunk}
    excess = needed + sum(natural[i] - floor[i] for i in shrunk) - width
    while excess > 0:
        narrowable = [i for i in shrunk if widths[i] > floor[i]]
        if not narrowable:
            break
        widths[max(narrowable, key=lambda i: (widths[i], i))] -= 1
        excess -= 1
    return _rich_table(table, keep, expand=False, widths=widths), left_out


def left_out_line(left_out: list[Column]) -> str:
    return f"(left out to fit the terminal: {', '.join(c.said() for c in left_out)}; --wide shows them)"


def _parts(console, table: Table, limit: int) -> tuple[list[Any], list[Column]]:
    """The table fitted to `limit`, its caption under it (wrapped at the terminal, never cut at the table's
    edge) and the line naming what was left out; and the columns left out."""
    from rich.text import Text

    rendered, left_out = fit(console, table, limit)
    parts: list[Any] = [rendered]
    if table.options.get("caption"):
        parts.append(Text(table.options["caption"]))
    if left_out:
        parts.append(Text(left_out_line(left_out), style="dim"))
    return parts, left_out


def print_table(console, table: Table, *, width: int | None = None) -> list[Column]:
    """Print `table` fitted to the console's width (or `width`), then the line naming what was left out.
    The columns left out are returned."""
    limit = console.width if width is None else width
    parts, left_out = _parts(console, table, limit)
    console.print(parts[0], width=limit)
    for line in parts[1:]:
        console.print(line, soft_wrap=line.plain.startswith("(left out"))   # the terminal wraps that one whole
    return left_out


def renderable(table: Table, *, wide: bool = False):
    """For a view that draws itself (rich's Live): the table fitted to the terminal (or whole, `wide`), with
    its caption and the line naming what was left out, as one renderable."""
    from rich.console import Group

    measuring = console(wide)
    parts, _ = _parts(measuring, table, measuring.width)
    return Group(*parts)
