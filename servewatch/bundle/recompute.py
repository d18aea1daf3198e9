"""Recompute verdicts from stored samples with the shipped detector code and a stored configuration."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from servewatch.detectors.verdict import Verdict
from servewatch.errors import BundleInvalid
from servewatch.bundle import serialize
from servewatch.timeline.samples import Sample
from servewatch.timeline.window import InstanceWindow, Window

Recompute = Callable[[Sequence[Sample] | Window, Mapping[str, Any]], Sequence[Verdict]]


def detectors_recompute(samples: Sequence[Sample] | Window, config: Mapping[str, Any]) -> Sequence[Verdict]:
    """Run the shipped detectors over the stored window with the stored configuration (a deployment's stored
    samples come as its Window, each instance's own: stored_samples)."""
    try:
        from servewatch.detectors import DetectorConfig, run_detectors
        from servewatch.detectors.config import RETIRED
    except ImportError as exc:
        raise BundleInvalid(f"cannot recompute verdicts: detectors unavailable ({exc})") from None
    window = samples if isinstance(samples, Window) else Window.from_samples(samples)
    return run_detectors(window, config_from_dict(DetectorConfig, config, retired=RETIRED))


def stored_samples(dicts: Sequence[Mapping[str, Any]],
                   deployment: Sequence[tuple[str, str]] = ()) -> list[Sample] | Window:
    """What a Recompute is given: the stored samples of one target; for a deployment (its instances' (name, role),
    in the order the recorder held them: incident.json's target.deployment), a Window of each instance's own."""
    if not deployment:
        return [serialize.sample_from_dict(d) for d in dicts]
    return Window(instances=tuple(
        InstanceWindow(name, role, Window.from_samples(serialize.sample_from_dict(d) for d in dicts
                                                       if d.get("instance") == name))
        for name, role in deployment))


def with_gaps(recompute: Recompute, stored_gaps: Mapping[str, Any] | None) -> Recompute:
    """`recompute`, its verdicts noted with the recorder's sampling gaps a bundle stores (window.recorder:
    detectors.starved), as the recorder noted them when it concluded them; `recompute` itself without any."""
    from servewatch.timeline.gaps import gaps_from_dict

    gaps = gaps_from_dict(stored_gaps)
    if not gaps:
        return recompute

    def noted(samples: Sequence[Sample], config: Mapping[str, Any]) -> Sequence[Verdict]:
        from servewatch.detectors.starved import note_gaps

        return note_gaps(recompute(samples, config), gaps)
    return noted


def config_from_dict(config_type: type, stored: Mapping[str, Any], *, retired: frozenset[str] = frozenset()):
    """Rebuild the detector configuration; a field this version does not know fails closed, except the `retired`
    settings that earlier versions stored and that now live elsewhere: read and ignored."""
    if not dataclasses.is_dataclass(config_type):
        return config_type(**stored)
    stored = {k: v for k, v in stored.items() if k not in retired}
    fields = {f.name: f for f in dataclasses.fields(config_type)}
    unknown = sorted(set(stored) - set(fields))
    if unknown:
        raise BundleInvalid(f"detector_config: unknown field {unknown[0]!r} (bundle from another version?)")
    values = {}
    for name, value in stored.items():
        if isinstance(value, list):
            value = tuple(x if isinstance(x, str) and x not in ("NaN", "+Inf", "-Inf") else serialize.unnumber(x)
                          for x in value)
        elif value is not None and not isinstance(value, (bool, str)) or value in ("NaN", "+Inf", "-Inf"):
            value = serialize.unnumber(value)
        values[name] = value
    return config_type(**values)
