"""The bundle's files as bytes: pure functions, no I/O.

A bundle is a directory of:
- `incident.json`   — identity, trigger, target, window summary, verdicts, detector config, writer counters;
- `samples-NNN.json` — the frozen window, allow-listed, split so that no file exceeds the size cap;
- `manifest.json`   — the SHA-256 of every other file's exact bytes, and `manifest_sha256`, the SHA-256 of
  the manifest's own bytes with that digest replaced by zeros. Every byte of every file is covered.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servewatch import __version__
from servewatch.detectors.verdict import Verdict
from servewatch.timeline import kinds
from servewatch.bundle import serialize
from servewatch.timeline.samples import Sample

INCIDENT = "incident.json"
MANIFEST = "manifest.json"
INCIDENT_SCHEMA = "servewatch.incident/1"
SAMPLES_SCHEMA = "servewatch.samples/1"
MANIFEST_SCHEMA = "servewatch.manifest/1"
DIGEST_PLACEHOLDER = "0" * 64
DEFAULT_MAX_FILE_BYTES = 256 * 1024
DEFAULT_MAX_SAMPLE_FILES = 8
ON_DEMAND = "on_demand"
THINNING_METHOD = "drop_oldest_unreferenced"
_WRAPPER_BYTES = 128   # the samples file's envelope around its sample list

_PROCESS_KEY = secrets.token_bytes(32)   # per process: incident ids never correlate across restarts


def part_name(i: int) -> str:
    return f"samples-{i:03d}.json"


def encode(document: Any) -> bytes:
    """The one JSON encoding used for every file: compact, ASCII, no NaN, newline-terminated."""
    return (json.dumps(document, separators=(",", ":"), ensure_ascii=True, allow_nan=False) + "\n").encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def incident_id(verdict: str, onset: float, target: str | None, key: bytes = _PROCESS_KEY) -> str:
    message = json.dumps([verdict, repr(float(onset)), target or ""]).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:32]


@dataclass
class BundleContext:
    """What the recorder knows besides the window and the verdicts."""

    target_url: str | None = None
    detector_config: Any = None                   # DetectorConfig (a dataclass) or a mapping
    target_versions: Mapping[str, str] | None = None
    dialect: str | None = None
    naming: str | None = None
    trigger: Any = None                           # the Verdict (or verdict name) that caused the bundle; None = first
    created_t: float | None = None                # defaults to the writer's clock
    overwritten: Mapping[str, int] = field(default_factory=dict)   # samples the ring dropped, per source
    identity: Mapping[str, Any] | None = None     # guard/watch --pid: how the PID was tied to the URL (actions.identity)
    recorder: Mapping[str, Any] | None = None     # the recorder's own sampling gaps (timeline.gaps.SamplingGaps.to_dict)


@dataclass(frozen=True)
class Thinning:
    applied: bool
    samples_before: int
    samples_after: int

    def to_dict(self) -> dict:
        return {"applied": self.applied, "samples_before": self.samples_before,
                "samples_after": self.samples_after, "method": THINNING_METHOD if self.applied else None}


def _pack(encoded: Sequence[bytes], budget: int) -> list[list[int]]:
    """Greedy, in order: indices of samples per part, each part's payload within `budget` bytes."""
    parts: list[list[int]] = [[]]
    used = 0
    for i, blob in enumerate(encoded):
        size = len(blob) + 1
        if parts[-1] and used + size > budget:
            parts.append([])
            used = 0
        parts[-1].append(i)
        used += size
    return parts


def split_samples(dicts: Sequence[dict], referenced: set[tuple[str, Any]], max_file_bytes: int,
                  max_files: int) -> tuple[list[list[dict]], Thinning]:
    """Split the sample dicts into parts under the cap; if they do not fit in `max_files` parts, drop the
    oldest samples that no verdict points at until they do (deterministic, recorded)."""
    budget = max_file_bytes - _WRAPPER_BYTES
    encoded = [json.dumps(d, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode() for d in dicts]
    keep = [len(e) + 1 <= budget for e in encoded]
    order = [i for i in range(len(dicts)) if (dicts[i]["source"], dicts[i]["t"]) not in referenced]
    cursor = 0
    while True:
        kept = [i for i in range(len(dicts)) if keep[i]]
        parts = _pack([encoded[i] for i in kept], budget)
        if len(parts) <= max_files or cursor >= len(order):
            break
        # Drop a tenth of what is left of the droppable ones (at least one), oldest first.
        step = max(1, (len(order) - cursor) // 10)
        for i in order[cursor:cursor + step]:
            keep[i] = False
        cursor += step
    parts = parts[-max_files:]   # still too many: the newest parts, where verdicts rest, win
    chosen = [[dicts[kept[j]] for j in part] for part in parts]
    after = sum(len(p) for p in chosen)
    return chosen, Thinning(applied=after < len(dicts), samples_before=len(dicts), samples_after=after)


def build_files(samples: Sequence[Sample], verdicts: Sequence[Verdict], context: BundleContext, *,
                created_t: float, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                max_sample_files: int = DEFAULT_MAX_SAMPLE_FILES, keep: int = 4, write_failures: int = 0,
                bundles_written: int = 0, key: bytes = _PROCESS_KEY,
                recompute: Callable | None = None) -> tuple[str, dict[str, bytes]]:
    """(incident id, {file name: exact bytes}) for one bundle.

    With `recompute`, each verdict is stored as the detectors restate it from the *stored* (allow-listed,
    possibly thinned) samples, so its text derives from what the bundle holds and `verify` can reproduce it.
    """
    deployment = tuple((i.name, i.role) for i in getattr(samples, "instances", ()))
    sample_dicts = deployment_dicts(samples) if deployment else serialize.samples_to_dicts(samples)
    config = serialize.config_to_dict(context.detector_config)
    verdict_dicts = [serialize.verdict_to_dict(v) for v in verdicts]
    referenced = {(e["source"], e["t"]) for v in verdict_dicts for e in v["evidence"]}
    parts, thinning = split_samples(sample_dicts, referenced, max_file_bytes, max_sample_files)
    stored = [d for part in parts for d in part]
    if recompute is not None and verdict_dicts:
        if context.recorder is not None:     # the notes of verdicts concluded across a gap, restated from the gaps
            from servewatch.bundle.recompute import with_gaps

            recompute = with_gaps(recompute, context.recorder)
        verdict_dicts = restate(verdict_dicts, stored, config, recompute, deployment)

    target = serialize.target_url(context.target_url)
    trigger = _trigger(verdict_dicts, context.trigger, stored, created_t)
    whose = target if not deployment else " ".join([*(n for n, _ in deployment), str(trigger.get("instance"))])
    trigger.pop("instance", None)
    ident = incident_id(trigger["verdict"], trigger["onset"], whose, key)
    times = [d["t"] for d in stored]
    counts = {source: sum(1 for d in stored if d["source"] == source) for source in kinds.names()}
    files: dict[str, bytes] = {}
    for i, part in enumerate(parts):
        files[part_name(i)] = encode({"schema": SAMPLES_SCHEMA, "part": i, "parts": len(parts), "samples": part})
    incident = {
        "schema": INCIDENT_SCHEMA,
        "incident_id": ident,
        "created_t": serialize.number(created_t),
        "trigger": trigger,
        "servewatch_version": __version__,
        "target": {
            "url": target,
            "dialect": serialize.safe_token(context.dialect),
            "generation": serialize.safe_token(context.naming),
            "versions": _versions(context.target_versions),
            **({"identity": identity} if (identity := _identity(context.identity)) else {}),
            **({"deployment": [{"name": name, "role": role} for name, role in deployment]} if deployment else {}),
        },
        "window": {
            "start_t": min(times) if times else None,
            "end_t": max(times) if times else None,
            "samples": counts,
            "overwritten": {s: int(context.overwritten.get(s, 0)) for s in kinds.names()},
            "files": list(files),
            "thinned": thinning.to_dict(),
            **({"recorder": _recorder(context.recorder)} if context.recorder is not None else {}),
        },
        "verdicts": verdict_dicts,
        "detector_config": config,
        "writer": {"max_file_bytes": max_file_bytes, "keep": keep, "write_failures": write_failures,
                   "bundles_written": bundles_written},
    }
    files[INCIDENT] = encode(incident)
    files[MANIFEST] = manifest_bytes({name: sha256(data) for name, data in files.items()})
    return ident, files


def _recorder(stored: Mapping[str, Any]) -> dict:
    """window.recorder: the recorder's sampling interval, the gap it counts as starved, and its gaps (epoch seconds)
    that overlap the window — evidence that a verdict in it was concluded late because the watcher was not run."""
    return {"interval_s": serialize.number(float(stored["interval_s"])),
            "threshold_s": serialize.number(float(stored["threshold_s"])),
            "gaps": [{"start_t": serialize.number(float(g["start_t"])), "end_t": serialize.number(float(g["end_t"]))}
                     for g in stored.get("gaps", ())]}


def deployment_dicts(window) -> list[dict]:
    """A deployment's samples (Window.instances) as stored: each instance's own, named by its `instance` (the
    deployment's token for it, host:port: never a URL or path) and its `role`, merged in time order."""
    out = []
    for instance in window.instances:
        name, role = serialize.safe_token(instance.name, None), serialize.safe_token(instance.role, None)
        if name is None or role not in serialize.KV_ROLES:
            raise ValueError("a deployment's instance without a plain name and role")
        out.extend({**d, "instance": name, "role": role} for d in serialize.samples_to_dicts(instance.window.samples()))
    return sorted(out, key=lambda d: serialize.unnumber(d["t"]))


def restate(verdict_dicts: Sequence[dict], stored: Sequence[dict], config: Mapping[str, Any],
            recompute: Callable, deployment: Sequence[tuple[str, str]] = ()) -> list[dict]:
    """Replace each verdict by the one recomputed from the stored samples with the same name, times and
    evidence pointers; a verdict that does not recompute is kept as given (verify will say so). `deployment`:
    the instances' (name, role) where the samples are a deployment's."""
    from servewatch.bundle.recompute import stored_samples

    try:
        again = [serialize.verdict_to_dict(v) for v in recompute(stored_samples(stored, deployment), config)]
    except Exception:   # the writer fails open; verify reports a verdict that does not follow
        return list(verdict_dicts)

    def identity(v: dict) -> tuple:      # the engine too: two replicas may stall at the very same times
        return (v["name"], v["t"], v["onset"], v["details"].get("engine"),
                tuple((e["source"], e["t"], e["field"]) for e in v["evidence"]))

    by_identity = {identity(v): v for v in again}
    return [by_identity.get(identity(v), v) for v in verdict_dicts]


def manifest_bytes(hashes: Mapping[str, str]) -> bytes:
    document = {"schema": MANIFEST_SCHEMA, "algorithm": "sha256", "files": dict(sorted(hashes.items())),
                "manifest_sha256": DIGEST_PLACEHOLDER}
    draft = encode(document)
    return draft.replace(_digest_field(DIGEST_PLACEHOLDER), _digest_field(sha256(draft)))


def _digest_field(digest: str) -> bytes:
    return f'"manifest_sha256":"{digest}"'.encode()


def manifest_self_digest_ok(data: bytes, claimed: str) -> bool:
    """Whether `claimed` is the SHA-256 of these exact bytes with the claim zeroed."""
    marker = _digest_field(claimed)
    if data.count(marker) != 1:
        return False
    return sha256(data.replace(marker, _digest_field(DIGEST_PLACEHOLDER))) == claimed


def _trigger(verdicts: Sequence[dict], wanted: Any, stored: Sequence[dict], created_t: float) -> dict:
    if isinstance(wanted, Verdict):
        wanted_dict = serialize.verdict_to_dict(wanted)
        def about(d: dict) -> tuple:       # a deployment's instances may fire the same verdict at the same times
            return d["name"], d["t"], d["onset"], d["details"].get("instance")

        for v in verdicts:
            if about(v) == about(wanted_dict):
                return {"verdict": v["name"], "onset": v["onset"], "instance": v["details"].get("instance")}
        wanted = wanted.name
    for v in verdicts:
        if wanted is None or v["name"] == wanted:
            return {"verdict": v["name"], "onset": v["onset"]}
    end = max((d["t"] for d in stored), default=None)
    return {"verdict": ON_DEMAND, "onset": serialize.number(end if end is not None else created_t)}


def _identity(identity: Mapping[str, Any] | None) -> dict | None:
    """{"verified", "override", "how"}: how the PID acted on (or recorded) was tied to the URL; the
    sentence only when it is plain words and numbers."""
    import re

    if not identity:
        return None
    how = str(identity.get("how") or "")
    return {"verified": bool(identity.get("verified")), "override": bool(identity.get("override")),
            "how": how if re.match(IDENTITY_HOW_PATTERN, how) else None}


IDENTITY_HOW_PATTERN = r"^[A-Za-z0-9 .,:;'()\[\]_-]{1,300}$"


def _versions(versions: Mapping[str, str] | None) -> dict[str, str]:
    import re

    out = {}
    for name, value in sorted((versions or {}).items()):
        if re.match(r"^[a-z][a-z0-9_]{0,39}$", str(name)) and re.match(r"^[A-Za-z0-9.+_-]{1,40}$", str(value)):
            out[name] = str(value)
    return out
