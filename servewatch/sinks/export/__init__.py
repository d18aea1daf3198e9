"""Export: serve's own /metrics, the fleet's verdicts and derived signals as `servewatch_*` series
(`exporter`), the verdict series kept as cached text (`verdict_series`) and each engine rank's state
(`rank_series`)."""
