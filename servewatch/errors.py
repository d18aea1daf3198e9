"""Errors that reach the user as one line on stderr and a non-zero exit, and the exit statuses of every
command (one table: docs/site/reference.md "Exit statuses" and every command's --help show it)."""

# The exit statuses, the same for every command.
OK = 0              # success: the command did what it was asked and found nothing wrong
CHECKED_BAD = 1     # the thing checked is bad: a verdict fired, a bundle fails verify, a drill step missed,
                    # no request succeeded
USAGE = 2           # usage or bad input: a bad flag or URL, a file that is missing or unreadable, a server
                    # that cannot be reached at the start
ACTED = 3           # acted: guard killed the server's process tree after a verdict (actions/policy.EXIT_KILLED)
INCONCLUSIVE = 4    # drill: a fault missed while the recorder was starved, none failed (drill/report.INCONCLUSIVE_EXIT)
HARDWARE = 6        # acted on a hardware fault: guard killed it after a GPU fault (actions/policy.EXIT_HARDWARE)
SIGNALLED = 128     # stopped by signal N after an orderly stop (records kept): 128 + N (130 SIGINT, 143 SIGTERM)

EXIT_STATUSES = (
    (OK, "success"),
    (CHECKED_BAD, "the thing checked is bad (a verdict fired, a bundle fails verify, a canary differs, a drill "
                  "step missed, no request succeeded)"),
    (USAGE, "usage or bad input (a bad flag, URL or file; a host name that does not resolve; nothing could be "
            "read)"),
    (ACTED, "acted (guard killed the server after a verdict)"),
    ("4, 5", "a command's own: drill 4 — a fault inconclusive, missed while the recorder was starved, none "
             "failed; guard 4 and 5 — see guard --help"),
    (HARDWARE, "acted on a hardware fault (guard killed the server after a GPU fault: do not restart it on "
               "that GPU)"),
    ("128+N", "stopped by signal N after an orderly stop, records kept (130 Ctrl-C, 143 SIGTERM)"),
)


def exit_status_epilog() -> str:
    """The table as every command's --help ends."""
    import textwrap

    rows = [textwrap.fill(meaning, 79, initial_indent=f"  {str(code):<6} ", subsequent_indent=" " * 9)
            for code, meaning in EXIT_STATUSES]
    return "exit statuses (every command):\n" + "\n".join(rows)


class ServewatchError(Exception):
    """Base class: str(error) is the one line the user sees."""

    exit_code = USAGE


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

    exit_code = CHECKED_BAD
