"""A YAML (or JSON) document read with the line of every value, so a bad value is named by file, line
and key in one line."""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.errors import ServewatchError
from servewatch.textfile import TextFileError, read_text


class DocumentError(ServewatchError):
    """One line: file:line: key: what is wrong."""


@dataclass(frozen=True)
class Document:
    path: str
    value: object
    lines: dict[tuple, int]        # (key, index, ...) -> 1-based line of that value

    def error(self, at: tuple, message: str) -> DocumentError:
        line = self.line_of(at)
        key = ".".join(str(part) if isinstance(part, str) else f"[{part}]" for part in at).replace(".[", "[")
        return DocumentError(f"{self.path}:{line}: {key or 'document'}: {message}")

    def line_of(self, at: tuple) -> int:
        while at and at not in self.lines:
            at = at[:-1]
        return self.lines.get(at, 1)


def read_document(path: str, text: str | None = None, *, max_bytes: int = 4 * 2**20) -> Document:
    """Parse `path` (or `text` as if read from it). Raises DocumentError naming the line."""
    import yaml

    if text is None:
        try:
            text = read_text(path, max_bytes=max_bytes)
        except TextFileError as exc:
            raise DocumentError(f"{path}: {exc}") from None
    loader = yaml.SafeLoader(text.replace("\t", " "))     # JSON may indent with tabs; YAML may not
    try:
        node = loader.get_single_node()
        value = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise DocumentError(f"{path}:{line}: not valid YAML/JSON ({exc.problem or exc.context})") from None
    except yaml.YAMLError as exc:
        raise DocumentError(f"{path}: not valid YAML/JSON ({type(exc).__name__})") from None
    finally:
        loader.dispose()
    lines: dict[tuple, int] = {}
    if node is not None:
        _walk(node, (), lines)
    return Document(path, value, lines)


def _walk(node, at: tuple, lines: dict) -> None:
    import yaml

    lines[at] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, child in node.value:
            if isinstance(key, yaml.ScalarNode):
                _walk(child, (*at, key.value), lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, child in enumerate(node.value):
            _walk(child, (*at, index), lines)
