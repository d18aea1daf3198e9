"""A small table of accelerators: memory as the driver reports it, bandwidth as the vendor rates it.

Memory is the total `nvidia-smi` prints (MiB, powers of 1024) — what the serving engine sees. An
"80 GB" H100 reports 81,559 MiB = 79.65 GiB: neither 80 GiB nor 80 x 10^9 bytes. Bandwidth is the
datasheet's peak HBM/GDDR figure in decimal bytes per second (3.35 TB/s = 3.35 x 10^12 B/s); real
kernels reach less, so a decode floor derived from it is a floor, not an expectation.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from servewatch.derive.quantities import MiB, TB
from servewatch.errors import ServewatchError


class HardwareError(ServewatchError):
    """An accelerator that is not in the table and has no overrides, or an impossible override."""


@dataclass(frozen=True, slots=True)
class Accelerator:
    name: str
    memory_bytes: Fraction
    bandwidth_bytes_per_s: Fraction | None
    memory_source: str
    bandwidth_source: str


_SMI = "nvidia-smi memory.total"
GPUS: dict[str, Accelerator] = {gpu.name.lower(): gpu for gpu in (
    Accelerator("H100-SXM-80GB", Fraction(81_559 * MiB), Fraction(335, 100) * TB,
                f"{_SMI} 81,559 MiB", "NVIDIA H100 SXM datasheet, 3.35 TB/s HBM3"),
    Accelerator("H200-141GB", Fraction(143_771 * MiB), Fraction(48, 10) * TB,
                f"{_SMI} 143,771 MiB", "NVIDIA H200 datasheet, 4.8 TB/s HBM3e"),
    Accelerator("A100-80GB", Fraction(81_920 * MiB), Fraction(2039, 1000) * TB,
                f"{_SMI} 81,920 MiB", "NVIDIA A100 80GB SXM datasheet, 2,039 GB/s HBM2e"),
    Accelerator("A10G-24GB", Fraction(23_028 * MiB), Fraction(600, 1000) * TB,
                f"{_SMI} 23,028 MiB", "NVIDIA A10 datasheet, 600 GB/s GDDR6"),
    Accelerator("L4-24GB", Fraction(23_034 * MiB), Fraction(300, 1000) * TB,
                f"{_SMI} 23,034 MiB", "NVIDIA L4 datasheet, 300 GB/s GDDR6"),
)}
ALIASES = {"h100": "h100-sxm-80gb", "h100-sxm": "h100-sxm-80gb", "h200": "h200-141gb", "a100": "a100-80gb",
           "a10g": "a10g-24gb", "l4": "l4-24gb"}


def known_names() -> str:
    return ", ".join(gpu.name for gpu in GPUS.values())


def resolve(name: str | None, memory_bytes: Fraction | None, bandwidth: Fraction | None) -> Accelerator:
    """The table's entry for `name`, with explicit overrides applied; without a name, both overrides."""
    if bandwidth is not None and bandwidth <= 0:
        raise HardwareError(f"--bandwidth must be above 0 bytes/s, not {float(bandwidth):g}")
    if memory_bytes is not None and memory_bytes <= 0:
        raise HardwareError(f"--gpu-memory must be above 0 bytes, not {float(memory_bytes):g}")
    base = None
    if name:
        key = name.strip().lower()
        base = GPUS.get(ALIASES.get(key, key))
        if base is None and (memory_bytes is None or bandwidth is None):
            raise HardwareError(f"unknown GPU {name!r}: known are {known_names()}; otherwise give --gpu-memory "
                                "BYTES (e.g. 81559MiB) and --bandwidth B/s (e.g. 3.35TB/s)")
    elif memory_bytes is None:
        raise HardwareError("no hardware given: name a GPU with --gpu (" + known_names() + ") or give "
                            "--gpu-memory BYTES and --bandwidth B/s")
    return Accelerator(
        name=base.name if base else (name or "custom"),
        memory_bytes=memory_bytes if memory_bytes is not None else base.memory_bytes,
        bandwidth_bytes_per_s=bandwidth if bandwidth is not None else (base.bandwidth_bytes_per_s if base else None),
        memory_source="given (--gpu-memory)" if memory_bytes is not None else base.memory_source,
        bandwidth_source=("given (--bandwidth)" if bandwidth is not None
                          else base.bandwidth_source if base else "not given"),
    )
