"""`servewatch load`: a scenario load generator with per-request records users can trust.

- `run_load(config)` / `run_load_async(config, client=..., clock=...)`: over HTTP (servewatch.load.runner).
- `run_load_virtual(config, engine)`: the same scenarios against the in-process simulator in
  virtual time (servewatch.load.virtual).
"""

from servewatch.load.runner import LoadResult, Progress, run_load, run_load_async
from servewatch.load.scenarios import Goodput, LoadConfig, PRESETS, SCENARIOS
from servewatch.load.virtual import run_load_virtual

__all__ = ["Goodput", "LoadConfig", "LoadResult", "PRESETS", "Progress", "SCENARIOS", "run_load",
           "run_load_async", "run_load_virtual"]
