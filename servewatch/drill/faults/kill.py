"""SIGKILL one process of the server (by role and rank): no cleanup, no goodbye."""

from __future__ import annotations

import signal

from servewatch.drill.faults.base import SignalFault, register


@register
class Kill(SignalFault):
    demands = "restart"
    kind = "kill"
    summary = "SIGKILL one process (role, rank)"
    default_role = "engine_core"
    signum = signal.SIGKILL
