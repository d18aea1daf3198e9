"""`servewatch load`: a scenario load generator with per-request records users can trust."""

from servewatch.load.runner import LoadResult, Progress, run_load, run_load_async
from servewatch.load.scenarios import Goodput, LoadConfig, PRESETS, SCENARIOS

__all__ = ["Goodput", "LoadConfig", "LoadResult", "PRESETS", "Progress", "SCENARIOS", "run_load",
           "run_load_async"]
