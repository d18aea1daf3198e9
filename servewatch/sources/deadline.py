"""Moved to `servewatch.transport.deadline` (the transport contract enforces every request's deadline with it);
re-exported here for the readers that still name it."""

from servewatch.transport.deadline import LATE_S, within  # noqa: F401
