"""Offline bundle verification that fails closed.

Order: file set and sizes -> manifest (schema, own digest) -> every file's SHA-256 -> canonical encoding
and schemas -> identity consistency (ids, counts, times, evidence pointers) -> every stored verdict
recomputed from the stored samples with the same detector code and configuration.

Each stored verdict must be reproduced exactly (name, times, why, evidence pointers and values, details);
verdicts the stored samples imply beyond those stored are counted in the OK line, not failed (a bundle may be
written for one condition while others hold). Any failure raises `BundleInvalid` whose message is the one line
the user sees. No check needs a key: the HMAC incident id cannot be recomputed offline, by design.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from servewatch import __version__, dialects
from servewatch.detectors import registry
from servewatch.detectors.verdict import Verdict
from servewatch.errors import BundleInvalid
from servewatch.timeline import kinds
from servewatch.bundle import layout, schemas, serialize
from servewatch.bundle.recompute import Recompute, config_from_dict, detectors_recompute, stored_samples, with_gaps

READ_LIMIT = 16 * 2**20            # no file a writer produces comes near this; anything larger is refused
MAX_FILES = 66                     # incident.json, manifest.json and at most 64 samples files (the schema's limit)

__all__ = ["Verified", "config_from_dict", "detectors_recompute", "load_bundle", "verify_bundle"]


@dataclass(frozen=True)
class Verified:
    path: Path
    incident: dict
    samples: list[dict]
    verdicts_checked: int
    verdicts_not_stored: int          # verdicts the samples imply that the bundle did not record

    @property
    def files_hashed(self) -> int:
        """The sample files, incident.json and the manifest."""
        return len(self.incident["window"]["files"]) + 2

    def line(self) -> str:
        extra = f"; {self.verdicts_not_stored} more verdict(s) follow but were not stored" \
            if self.verdicts_not_stored else ""
        return (f"OK {self.path.name}: {self.files_hashed} files hashed, "
                f"{len(self.samples)} samples, {self.verdicts_checked} verdict(s) recomputed and matched{extra}")


def verify_bundle(path: str | Path, recompute: Recompute | None = None) -> Verified:
    """Every check, then the recomputation; raises BundleInvalid (one line) on the first failure."""
    path = Path(path)
    with _fail_closed():
        incident, samples = _checked(path)
        checked, not_stored = _check_recomputation(incident, samples, recompute or detectors_recompute)
    return Verified(path=path, incident=incident, samples=samples, verdicts_checked=checked,
                    verdicts_not_stored=not_stored)


def load_bundle(path: str | Path) -> tuple[dict, list[dict]]:
    """incident.json and the sample dicts of a bundle that passes every check but the recomputation."""
    with _fail_closed():
        return _checked(Path(path))


def _checked(path: Path) -> tuple[dict, list[dict]]:
    files = _read_files(path)
    manifest = _check_manifest(files)
    incident = _document(files, layout.INCIDENT, "incident")
    samples = _check_samples_files(files, manifest, incident)
    _check_identity(incident, samples, path.name)
    return incident, samples


@contextmanager
def _fail_closed():
    """Anything unexpected while checking is a failed check, said in one line, never a traceback."""
    try:
        yield
    except BundleInvalid:
        raise
    except OSError as exc:
        raise BundleInvalid(f"cannot read the bundle: {exc.strerror or exc}") from None
    except Exception as exc:
        raise BundleInvalid(f"unexpected {type(exc).__name__}: {' '.join(str(exc).split())[:160]}") from None


# --- files, manifest, hashes --------------------------------------------------------------------

def _read_files(path: Path) -> dict[str, bytes]:
    if not path.is_dir():
        raise BundleInvalid("not a bundle directory")      # the path is said by whoever names the bundle
    files: dict[str, bytes] = {}
    entries = sorted(path.iterdir())
    if len(entries) > MAX_FILES:
        raise BundleInvalid(f"{len(entries)} entries: more than a bundle can hold ({MAX_FILES})")
    for entry in entries:
        if entry.is_symlink() or not entry.is_file():
            raise BundleInvalid(f"{entry.name}: unexpected entry (bundles hold regular files only)")
        with open(entry, "rb") as f:
            data = f.read(READ_LIMIT + 1)
        if len(data) > READ_LIMIT:
            raise BundleInvalid(f"{entry.name}: larger than {READ_LIMIT} bytes")
        files[entry.name] = data
    if layout.MANIFEST not in files:
        raise BundleInvalid("manifest.json missing")
    return files


def _check_manifest(files: dict[str, bytes]) -> dict:
    data = files[layout.MANIFEST]
    manifest = _parse(data, layout.MANIFEST)
    claimed = manifest.get("manifest_sha256")
    if not isinstance(claimed, str) or not layout.manifest_self_digest_ok(data, claimed):
        raise BundleInvalid("manifest.json: its own SHA-256 does not match (manifest altered)")
    _validate(manifest, "manifest", layout.MANIFEST)
    listed = set(manifest["files"])
    present = set(files) - {layout.MANIFEST}
    if present - listed:
        raise BundleInvalid(f"{sorted(present - listed)[0]}: file not listed in the manifest")
    if listed - present:
        raise BundleInvalid(f"{sorted(listed - present)[0]}: listed in the manifest but missing")
    for name in sorted(listed):
        if layout.sha256(files[name]) != manifest["files"][name]:
            raise BundleInvalid(f"{name}: SHA-256 does not match the manifest")
    if layout.encode(manifest) != data:
        raise BundleInvalid("manifest.json: not in canonical encoding")
    return manifest


def _document(files: dict[str, bytes], name: str, schema: str) -> dict:
    if name not in files:
        raise BundleInvalid(f"{name} missing")
    document = _parse(files[name], name)
    _validate(document, schema, name)
    if layout.encode(document) != files[name]:
        raise BundleInvalid(f"{name}: not in canonical encoding")
    return document


def _check_samples_files(files: dict[str, bytes], manifest: dict, incident: dict) -> list[dict]:
    parts = incident["window"]["files"]
    expected = [layout.part_name(i) for i in range(len(parts))]
    if parts != expected:
        raise BundleInvalid(f"incident.json: window.files {parts} should be {expected}")
    if set(manifest["files"]) != set(parts) | {layout.INCIDENT}:
        raise BundleInvalid("manifest.json: file set differs from incident.json window.files")
    cap = incident["writer"]["max_file_bytes"]
    for name, data in files.items():
        if name != layout.MANIFEST and len(data) > cap:
            raise BundleInvalid(f"{name}: {len(data)} bytes, over the bundle's cap of {cap}")
    samples: list[dict] = []
    for i, name in enumerate(parts):
        document = _document(files, name, "samples")
        if document["part"] != i or document["parts"] != len(parts):
            raise BundleInvalid(f"{name}: part {document['part']}/{document['parts']}, expected {i}/{len(parts)}")
        samples.extend(document["samples"])
    return samples


# --- identity and consistency ---------------------------------------------------------------------

def _t(value: Any) -> float:
    if isinstance(value, str):
        raise BundleInvalid(f"non-finite time {value!r}")
    return float(value)


def _check_name(incident: dict, name: str) -> None:
    """A directory still named as the writer named it must name this incident (no files from another)."""
    from datetime import datetime, timezone

    from servewatch.bundle.writer import BUNDLE_NAME

    match = BUNDLE_NAME.match(name)
    if not match:
        return
    stamp = datetime.fromtimestamp(_t(incident["created_t"]), tz=timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    expected = f"incident-{stamp}-{incident['trigger']['verdict']}-{incident['incident_id'][:8]}"
    if name != expected and not name.startswith(expected + "-"):
        raise BundleInvalid(f"directory name {name} does not match incident.json (expected {expected})")


def _check_identity(incident: dict, samples: list[dict], name: str) -> None:
    _check_name(incident, name)
    window = incident["window"]
    times = [_t(s["t"]) for s in samples]
    if any(b < a for a, b in zip(times, times[1:])):
        raise BundleInvalid("samples: not in time order")
    counts = {source: 0 for source in kinds.names()}
    for s in samples:
        counts[s["source"]] += 1
    # A kind added after the bundle was written (slots) is absent from its counts: none of it in its files.
    if counts != {**{source: 0 for source in kinds.names() if source not in window["samples"]}, **window["samples"]}:
        raise BundleInvalid(f"incident.json: window.samples {window['samples']} but the files hold {counts}")
    start, end = (min(times), max(times)) if times else (None, None)
    if window["start_t"] != start or window["end_t"] != end:
        raise BundleInvalid(f"incident.json: window {window['start_t']}..{window['end_t']} "
                            f"but the samples span {start}..{end}")
    thinned = window["thinned"]
    if thinned["samples_after"] != len(samples) or thinned["applied"] != (thinned["samples_before"] > len(samples)) \
            or thinned["samples_before"] < len(samples) or (thinned["method"] is None) == thinned["applied"]:
        raise BundleInvalid("incident.json: thinning record inconsistent with the stored samples")
    created = _t(incident["created_t"])
    if end is not None and created < end:
        raise BundleInvalid(f"incident.json: created_t {created} precedes the newest sample {end}")

    _check_deployment(incident, samples)
    stored = {(s["source"], _t(s["t"])) for s in samples}
    verdicts = incident["verdicts"]
    for v in verdicts:
        t, onset = _t(v["t"]), _t(v["onset"])
        label = f"verdict {v['name']} at t={v['t']}"
        if onset > t:
            raise BundleInvalid(f"{label}: onset {onset} after its time")
        if start is None or not (start <= t <= end):
            raise BundleInvalid(f"{label}: outside the stored window")
        for e in v["evidence"]:
            if (e["source"], _t(e["t"])) not in stored:
                raise BundleInvalid(f"{label}: evidence {e['source']}@{e['t']} is not a stored sample")
    trigger = incident["trigger"]
    if trigger["verdict"] == layout.ON_DEMAND:
        want = end if end is not None else created
        if _t(trigger["onset"]) != want:
            raise BundleInvalid("incident.json: on-demand trigger onset is not the window end")
    elif not any(v["name"] == trigger["verdict"] and v["onset"] == trigger["onset"] for v in verdicts):
        raise BundleInvalid(f"incident.json: trigger {trigger['verdict']} is not among the stored verdicts")
    if len({json.dumps(v, sort_keys=True) for v in verdicts}) != len(verdicts):
        raise BundleInvalid("incident.json: duplicate verdicts")


def deployment_of(incident: dict) -> tuple[tuple[str, str], ...]:
    """A deployment's instances (name, role) as incident.json lists them; () for one target."""
    return tuple((i["name"], i["role"]) for i in incident.get("target", {}).get("deployment", ()))


def _check_deployment(incident: dict, samples: list[dict]) -> None:
    """A deployment's bundle: each instance listed once, and every sample named by a listed instance with its
    role; one target's: no sample names an instance."""
    deployment = deployment_of(incident)
    roles = dict(deployment)
    if len(roles) != len(deployment):
        raise BundleInvalid("incident.json: target.deployment lists an instance twice")
    for s in samples:
        name = s.get("instance")
        if not deployment:
            if name is not None:
                raise BundleInvalid(f"samples: a {s['source']} sample names instance {name}, but the target is "
                                    f"not a deployment")
            continue
        if name not in roles:
            raise BundleInvalid(f"samples: a {s['source']} sample at t={s['t']} names no instance of the deployment")
        if s.get("role") != roles[name]:
            said = f"says role {s['role']}" if s.get("role") else "names no role"
            raise BundleInvalid(f"samples: a {s['source']} sample of {name} {said}, the deployment says {roles[name]}")


# --- recomputation ---------------------------------------------------------------------------------

def _check_recomputation(incident: dict, sample_dicts: list[dict], recompute: Recompute) -> tuple[int, int]:
    try:
        samples = stored_samples(sample_dicts, deployment_of(incident))
    except serialize.DecodeError as exc:
        raise BundleInvalid(f"samples: {exc}") from None
    try:
        recomputed = with_gaps(recompute, incident["window"].get("recorder"))(samples, incident["detector_config"])
    except BundleInvalid:
        raise
    except Exception as exc:
        raise BundleInvalid(f"recomputation failed: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}") \
            from None
    remaining = [serialize.verdict_to_dict(v) for v in recomputed]
    for stored in incident["verdicts"]:
        key = _key(stored)
        if "action" not in stored:          # written before a firing carried its action: compared without it
            remaining = [{k: x for k, x in d.items() if k != "action"} for d in remaining]
        keys = [_key(d) for d in remaining]
        if key not in keys:
            near = [v for v in recomputed if v.name == stored["name"]]
            hint = f" (recomputed: {_describe(near[0])})" if near else " (the detectors do not fire)"
            written_by = incident["servewatch_version"]
            if written_by != __version__:
                hint += f"; bundle written by servewatch {written_by}, this is {__version__}"
            raise BundleInvalid(f"verdict {stored['name']} at t={stored['t']} does not follow from the stored "
                                f"samples{hint}")
        del remaining[keys.index(key)]
    return len(incident["verdicts"]), len(remaining)


def _key(verdict_dict: dict) -> str:
    return json.dumps(verdict_dict, sort_keys=True, allow_nan=False)


def _describe(v: Verdict) -> str:
    return f"onset={v.onset} t={v.t}"


# --- JSON and schemas --------------------------------------------------------------------------------

def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"non-standard constant {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number out of range {text[:20]}")
    return value


def _parse(data: bytes, name: str) -> Any:
    try:
        document = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates,
                              parse_constant=_no_constants, parse_float=_finite_float)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BundleInvalid(f"{name}: not valid JSON ({' '.join(str(exc).split())[:120]})") from None
    if not isinstance(document, dict):
        raise BundleInvalid(f"{name}: not a JSON object")
    return document


@lru_cache(maxsize=16)
def _validator(schema: str, verdict_names: tuple[str, ...], label_keys: tuple[str, ...],
               added_kinds: tuple[kinds.SourceKind, ...] = ()):
    import jsonschema

    document = schemas.load(schema, verdict_names, label_keys, added_kinds)
    cls = jsonschema.validators.validator_for(document)
    return cls(document)


def _validate(document: Any, schema: str, name: str) -> None:
    error = next(iter(_validator(schema, registry.names(), dialects.identity_labels(), kinds.added()).iter_errors(document)), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise BundleInvalid(f"{name}: schema violation at {where}: {' '.join(error.message.split())[:160]}")

