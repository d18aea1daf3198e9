"""`servewatch serve`: one process watches a fleet of servers and speaks Prometheus, Alertmanager and
Kubernetes probes. Each target is recorded exactly as `watch` records one (the same recorder and
detectors); the fleet adds target discovery, sharding, backoff, and the HTTP surface."""
