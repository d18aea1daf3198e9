"""A TEST-ONLY stand-in for SGLang's `sgl_kernel` package, written by the lab into its own cache.

Why: SGLang 0.5.23's CPU path imports `sgl_kernel` (kvcache/cache_move.py) at start-up, but the
registry's `sgl-kernel` wheels are CUDA builds that need libcuda, and SGLang's own CPU kernels are
only built for Intel CPUs with AMX. On a CPU without AMX every layer runs plain PyTorch and never
calls a kernel. The stand-in lets that import succeed without changing SGLang:

- `copy_all_layer_kv_cache_cpu` is done in plain torch (for each buffer, `buf[tgt] = buf[src]`);
- every other name is a function that writes STAND_IN_CALLED to stderr and raises NotImplementedError.

So a run that touched a stubbed op says so in SGLang's log, and the lab fails it (see
`stand_in_calls`) instead of passing on a fake. The module is written under
<lab cache>/servewatch-test-only-stand-ins/ and put first on the server's PYTHONPATH only: it is never
installed into any environment.
"""

from __future__ import annotations

import re
from pathlib import Path

STAND_IN_CALLED = "SERVEWATCH-TEST-ONLY-STAND-IN-CALLED"
DIR_NAME = "servewatch-test-only-stand-ins"
_CALL = re.compile(re.escape(STAND_IN_CALLED) + r": sgl_kernel\.(?P<name>[\w.]+)")

SOURCE = f'''"""TEST-ONLY stand-in for `sgl_kernel`, written by `servewatch lab sglang`. Not SGLang's kernels.

Only copy_all_layer_kv_cache_cpu is implemented (plain torch); any other name logs
{STAND_IN_CALLED} and raises NotImplementedError, and the lab fails the run.
"""

import sys

SERVEWATCH_TEST_ONLY = True


def copy_all_layer_kv_cache_cpu(k_buffers, v_buffers, tgt_indices, src_indices):
    for buffer in (*k_buffers, *v_buffers):
        buffer[tgt_indices] = buffer[src_indices]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def not_available(*args, **kwargs):
        sys.stderr.write("{STAND_IN_CALLED}: sgl_kernel." + name + "\\n")
        sys.stderr.flush()
        raise NotImplementedError("sgl_kernel." + name + " is not in servewatch's test-only stand-in")

    not_available.__name__ = name
    return not_available
'''


def write_stand_in(cache_dir: Path) -> Path:
    """Write the package (idempotent); return the directory to put first on PYTHONPATH."""
    root = cache_dir / DIR_NAME
    package = root / "sgl_kernel"
    package.mkdir(parents=True, exist_ok=True)
    target = package / "__init__.py"
    if not target.is_file() or target.read_text(encoding="utf-8") != SOURCE:
        target.write_text(SOURCE, encoding="utf-8")
    return root


def stand_in_calls(log_text: str) -> list[str]:
    """The stubbed sgl_kernel names a run called, in order of first call (empty: none was)."""
    return list(dict.fromkeys(match["name"] for match in _CALL.finditer(log_text)))
