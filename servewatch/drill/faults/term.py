"""SIGTERM to the API server: a graceful stop, as a service manager or a kubelet asks for one."""

from __future__ import annotations

import signal

from servewatch.drill.faults.base import SignalFault, register


@register
class Term(SignalFault):
    kind = "term"
    summary = "SIGTERM, a graceful stop (to the API server unless a role is given)"
    default_role = "api"
    signum = signal.SIGTERM
