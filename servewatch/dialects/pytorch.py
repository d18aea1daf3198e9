"""PyTorch's out-of-memory texts, which every engine built on PyTorch writes into its log: a dialect of
such an engine declares them in its `RecordGrammar`."""

from __future__ import annotations

import re

OOM_EXCEPTIONS = ("OutOfMemoryError",)
OOM_LITERALS = ("CUDA out of memory", "out of memory. Tried to allocate")
# "CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacity of 11.63 GiB of which
# 84.88 MiB is free."
_SIZE = r"(?P<{0}>[\d.]+) (?P<{0}_unit>[KMGT]?i?B)"
OOM_DETAILS = re.compile(
    r"Tried to allocate " + _SIZE.format("requested") +
    r"(?:\.? ?(?:GPU|Device) (?P<device>\d+) has a total capacity of " + _SIZE.format("total") +
    r" of which " + _SIZE.format("free") + r" is free)?")
