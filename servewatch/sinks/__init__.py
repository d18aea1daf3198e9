"""Live sinks: what hears a verdict fire and clear, through one interface (`base.Sink`): the incident-bundle
sink (`bundle_sink`), serve's Prometheus exporter (`exporter`), and the delivery kinds `serve` builds by name
from its config through a registry of factories (`registry`: Alertmanager and webhook, in `alertmanager` over
`delivery`). The bundle format, its verification and reports are `servewatch.bundle`.
"""
