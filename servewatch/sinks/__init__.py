"""Live sinks: what hears a verdict fire and clear, through one interface (`base.Sink`), split by concern:

- bundle writing: `bundle_sink` (an incident bundle per fired verdict; the format, its verification and
  reports are `servewatch.bundle`);
- export: `export/` (serve's Prometheus exporter and the series it keeps);
- delivery: `delivery/` (Alertmanager and webhook clients over one background poster, built by name from
  serve's config through `delivery.registry`).
"""
