"""The incident bundle: its format, its writer, its offline check and the reports read from it.

- `writer.BundleWriter` writes an incident bundle (a directory, 0700; files 0600; atomic; rotated; fails open):
  `incident.json` (closed schema `schema/incident.schema.json`), `samples-NNN.json` (the frozen window,
  allow-listed by `serialize`, split under the per-file cap and thinned if it must be), `manifest.json` (SHA-256 of
  every file's exact bytes, plus its own digest); `layout` lays the files out, `schemas` regenerates the schemas'
  enums from the registries.
- `verify.verify_bundle` checks a bundle offline and recomputes its verdicts (`recompute`) with the shipped detectors.
- `summarize.render_markdown` and `report_html` (inline-SVG charts, single-file pages) turn a bundle
  (`incident.load_incident`) into reports.

Nothing here hears a verdict live: the sink that writes a bundle when one fires is `sinks/bundle_sink.py`.
"""
