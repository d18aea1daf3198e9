"""What a parsed exposition is made of."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Sample:
    name: str                      # full sample name, e.g. vllm:e2e_request_latency_seconds_bucket
    labels: dict[str, str]
    value: float
    timestamp: float | None = None  # seconds, when the exposition carried one


@dataclass(slots=True)
class Family:
    name: str                      # the name on the TYPE line (or the sample name when untyped)
    type: str                      # counter | gauge | histogram | summary | info | stateset | gaugehistogram | unknown | untyped
    help: str = ""
    samples: list[Sample] = field(default_factory=list)
    # Equal for two families read through one scrape layout (same samples, names and labels in the same
    # order; only values differ), so work that depends only on the labels can be done once per shape.
    # None after a full parse.
    shape: tuple[int, int] | None = field(default=None, compare=False, repr=False)

    @property
    def values(self) -> list[float]:
        """The samples' values, in order."""
        return [sample.value for sample in self.samples]
