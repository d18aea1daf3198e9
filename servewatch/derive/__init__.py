"""Derive: capacity, thresholds, histogram edges, alert rules and dashboards from the model, the hardware
and the SLO — numbers with their arithmetic, not guesses."""
