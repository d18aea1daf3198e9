"""Errors that reach the user as one line on stderr and a non-zero exit."""


class ServewatchError(Exception):
    """Base class: str(error) is the one line the user sees."""

    exit_code = 2


class SourceUnavailable(ServewatchError):
    """A URL, file, PID or device could not be read."""


class ExpositionError(ServewatchError):
    """A /metrics body that is not valid Prometheus / OpenMetrics text."""

    def __init__(self, message: str, line_no: int | None = None):
        self.line_no = line_no
        where = f"line {line_no}: " if line_no is not None else ""
        super().__init__(f"{where}{message}")


class BodyTooLarge(ExpositionError):
    """A body or line over the configured byte bound: a /metrics scrape, or any HTTP response the load
    generator reads (the one class for both)."""


class TooManySeries(ExpositionError):
    """A /metrics body with more series (sample lines) than the configured bound."""


class BundleInvalid(ServewatchError):
    """A bundle that fails verification (hash, schema, identity or verdict)."""

    exit_code = 1
