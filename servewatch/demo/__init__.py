"""`servewatch demo`: the built-in engine, four workloads (normal, overload, long prompt, long output)
under the recorder, then a health-green stall, an idle wedge and an engine death — ending in the signature table, the
verdicts with their evidence and detection times, what /health said meanwhile, and a shareable report."""
