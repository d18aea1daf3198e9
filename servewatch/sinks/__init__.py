"""Sinks: what servewatch writes and how it is checked.

- `bundle.BundleWriter` writes an incident bundle (a directory, 0700; files 0600; atomic; rotated; fails open):
  `incident.json` (closed schema `schema/incident.schema.json`), `samples-NNN.json` (the frozen window,
  allow-listed by `serialize`, split under the per-file cap and thinned if it must be), `manifest.json` (SHA-256 of
  every file's exact bytes, plus its own digest).
- `verify.verify_bundle` checks a bundle offline and recomputes its verdicts with the shipped detectors.
- `summarize.render_markdown`, `report_html` (inline-SVG charts, single-file pages) and `runbook` turn a bundle
  (`incident.load_incident`) into reports.
"""
