"""A file a person hands servewatch (serve's config and file_sd files, a drill plan, an SLO file, a --detectors
file), read in one place: bounded in size, UTF-8 or refused, and a YAML text's line when it does not parse. Each
failure is one `TextFileError` whose words say what is wrong; the caller puts its flag or file name in front."""

from __future__ import annotations

DEFAULT_MAX_BYTES = 4 * 2**20


class TextFileError(ValueError):
    """What is wrong with a file or its text, in words: "cannot be read (No such file or directory)", "not UTF-8
    text", "larger than 4,194,304 bytes", "not valid YAML (...)". `line`: where, for YAML that does not parse
    (1-based; None where the parser names none); `problem`: the parser's own words."""

    def __init__(self, words: str, *, line: int | None = None, problem: str | None = None):
        super().__init__(words)
        self.line = line
        self.problem = problem


def read_text(path: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The file's text. Raises TextFileError: it cannot be read, it is larger than `max_bytes`, or not UTF-8."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as exc:
        raise TextFileError(f"cannot be read ({exc.strerror or exc})") from None
    if len(raw) > max_bytes:
        raise TextFileError(f"larger than {max_bytes:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TextFileError("not UTF-8 text") from None


def yaml_value(text: str) -> object:
    """The YAML (or JSON) `text`'s value, read safely. Raises TextFileError with the line the parser names."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "parse error"
        raise TextFileError(f"not valid YAML ({problem})", line=mark.line + 1 if mark is not None else None,
                            problem=problem) from None
