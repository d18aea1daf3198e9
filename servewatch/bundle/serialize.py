"""Samples and verdicts <-> allow-listed JSON dicts.

Every field is copied by name through an explicit allow-list; nothing is serialised by reflection.
Strings that could carry private text (process titles, label values, log fields, error messages) are
reduced to a short safe token or dropped. Decoding is the exact inverse for anything already safe, so a
verdict recomputed from the stored samples matches the one computed live.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from servewatch import dialects
from servewatch.detectors import registry
from servewatch.detectors.verdict import ACTION_CLASSES, Evidence, Verdict
from servewatch.dialects.base import Slot
from servewatch.engine.state import HISTOGRAM_KINDS, Counters, EngineState, Histogram, KvTransfer
from servewatch.timeline import kinds
from servewatch.timeline.samples import (
    GpuDevice,
    GpuProcess,
    GpuSample,
    GpuXid,
    HealthSample,
    PROBE_OUTCOMES,
    LogEvent,
    MetricsSample,
    ProbeSample,
    ProcessMember,
    ProcessSample,
    SlotsSample,
    SlotView,
    REQUEST_OUTCOMES,
    RequestsSample,
    Sample,
)


_TOKEN = re.compile(r"^[A-Za-z0-9_.:+-]{1,64}$")
_KEY = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_STATUS_KEY = re.compile(r"^(?:[1-5](?:xx|[0-9][0-9])|unrouted)$")   # an HTTP status class or code
_LITERAL = re.compile(r"^[A-Za-z0-9_.:,'()% -]{1,160}$")   # the shape a grammar literal may have in a bundle
_ERROR_CLASS = re.compile(r"[A-Za-z0-9_]+")
_NON_FINITE = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}

ROLES = frozenset({"api", "engine_core", "worker", "other"})
# Log-event fields whose string values may be kept: a short token, or a fixed literal of a dialect's log
# grammar (servewatch.dialects) or of the log source. Any other string is dropped.
LOG_STRING_KEYS = frozenset({"level", "reason", "cause", "exception", "device", "unit", "signal", "phase",
                             "worker", "code", "process", "dialect", "state", "stage", "component", "batch", "op",
                             "error"})


def grammar_literal(value: str) -> bool:
    """Is `value` a fixed string of a registered dialect's grammar, of a shape a bundle may hold?"""
    return value in dialects.grammar_literals() and _LITERAL.match(value) is not None


class DecodeError(ValueError):
    """A stored dict that does not describe a sample or verdict."""


# --- scalar helpers ---------------------------------------------------------------------------

def number(value: float | int | None) -> float | int | str | None:
    """A JSON-safe number: non-finite floats become "NaN", "+Inf", "-Inf"."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def unnumber(value: Any) -> float | int | None:
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    raise DecodeError(f"not a number: {value!r}")


def unvalue(value: Any) -> float | int | str | bool | None:
    """The inverse of a mixed field (number, bool, string or null)."""
    if isinstance(value, bool) or isinstance(value, str) and value not in _NON_FINITE:
        return value
    return unnumber(value)


def safe_token(value: str | None, default: str | None = "other") -> str | None:
    """A short identifier-like string, or `default` when the value is anything else."""
    if value is None:
        return None
    return value if _TOKEN.match(value) else default


def error_class(value: str | None) -> str | None:
    """The leading word of an error ("timeout after 2 s" -> "timeout"); messages never enter a bundle."""
    if value is None:
        return None
    match = _ERROR_CLASS.match(value)
    return match.group(0)[:40] if match else "other"


def process_title(value: str) -> str:
    """The process name only: first word, without any directory, no arguments."""
    words = value.split()
    head = words[0].rsplit("/", 1)[-1] if words else ""     # "dir/" names no program: it becomes "other"
    return head if _TOKEN.match(head) else "other"


def label_value(key: str, value: str) -> str:
    if key == "model_name":
        value = value.rstrip("/").rsplit("/", 1)[-1]   # a served model name may be a local path
    return value if _TOKEN.match(value) else "redacted"


def target_url(url: str | None) -> str | None:
    """scheme://host:port only: no user info, path, query or fragment."""
    from urllib.parse import urlsplit

    if not url:
        return None
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        host = parts.hostname
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None
    if not host or parts.scheme not in ("http", "https") or port is None:
        return None
    if ":" in host:
        host = f"[{host}]"
    if not re.match(r"^[A-Za-z0-9.\-\[\]:]{1,255}$", host):
        return None
    return f"{parts.scheme}://{host}:{port}"


def _str_map(values: Mapping[str, Any]) -> dict[str, float | int | str | None]:
    return {k: number(v) for k, v in sorted(values.items()) if isinstance(k, str) and _KEY.match(k)}


# --- samples ----------------------------------------------------------------------------------

def histogram_to_dict(h: Histogram) -> dict:
    return {"edges": [number(e) for e in h.edges], "cumulative": [number(c) for c in h.cumulative],
            "count": number(h.count), "sum": number(h.sum)}


def histogram_from_dict(d: Mapping) -> Histogram:
    return Histogram(edges=tuple(unnumber(e) for e in d["edges"]),
                     cumulative=tuple(unnumber(c) for c in d["cumulative"]),
                     count=unnumber(d["count"]), sum=unnumber(d["sum"]))


KV_ROLES = ("prefill", "decode")
_KV_NUMBERS = tuple(name for name in KvTransfer.__dataclass_fields__ if name != "role")


def kv_transfer_to_dict(kv: KvTransfer) -> dict:
    return {"role": kv.role if kv.role in KV_ROLES else None, **{name: number(getattr(kv, name)) for name in _KV_NUMBERS}}


def kv_transfer_from_dict(d: Mapping) -> KvTransfer:
    role = d.get("role")
    return KvTransfer(role=role if role in KV_ROLES else None, **{name: unnumber(d.get(name)) for name in _KV_NUMBERS})


def engine_to_dict(e: EngineState) -> dict:
    out = _engine_to_dict(e)
    if e.kv_transfer is not None:      # only an engine with a KV connector (P/D) has it; older bundles never do
        out["kv_transfer"] = kv_transfer_to_dict(e.kv_transfer)
    return out


def _engine_to_dict(e: EngineState) -> dict:
    c = e.counters
    return {
        "dialect": safe_token(e.dialect),
        "generation": safe_token(e.naming),
        "labels": {k: label_value(k, str(v)) for k, v in sorted(e.labels.items())
                   if k in dialects.identity_labels()},   # the schemas list the same (bundle/schemas.py)
        "running": number(e.running),
        "waiting": number(e.waiting),
        "waiting_by_reason": _str_map(e.waiting_by_reason),
        "slot_limit": e.slot_limit,
        "kv_usage": number(e.kv_usage),
        "kv_used_tokens": number(e.kv_used_tokens),
        "kv_total_tokens": number(e.kv_total_tokens),
        "counters": {
            "prompt_tokens": number(c.prompt_tokens),
            "generation_tokens": number(c.generation_tokens),
            "preemptions": number(c.preemptions),
            "steps": number(c.steps),
            "finished": _str_map(c.finished),
            "responses": {k: number(v) for k, v in sorted(c.responses.items()) if _STATUS_KEY.match(k)},
            "request_bytes": number(c.request_bytes),
            "request_bytes_count": number(c.request_bytes_count),
            "answered": number(c.answered),
            "tokens_shared": bool(c.tokens_shared),
        },
        "histograms": {kind: histogram_to_dict(e.histograms[kind]) for kind in HISTOGRAM_KINDS
                       if kind in e.histograms},
    }


def engine_from_dict(d: Mapping) -> EngineState:
    c = d["counters"]
    return EngineState(
        dialect=d["dialect"],
        naming=d["generation"],
        labels=dict(d["labels"]),
        running=unnumber(d["running"]),
        waiting=unnumber(d["waiting"]),
        waiting_by_reason={k: unnumber(v) for k, v in d["waiting_by_reason"].items()},
        slot_limit=d["slot_limit"],
        kv_usage=unnumber(d["kv_usage"]),
        kv_used_tokens=unnumber(d["kv_used_tokens"]),
        kv_total_tokens=unnumber(d["kv_total_tokens"]),
        counters=Counters(
            prompt_tokens=unnumber(c["prompt_tokens"]),
            generation_tokens=unnumber(c["generation_tokens"]),
            preemptions=unnumber(c["preemptions"]),
            steps=unnumber(c["steps"]),
            finished={k: unnumber(v) for k, v in c["finished"].items()},
            responses={k: unnumber(v) for k, v in c.get("responses", {}).items()},   # older bundles lack these
            request_bytes=unnumber(c.get("request_bytes")),
            request_bytes_count=unnumber(c.get("request_bytes_count")),
            answered=unnumber(c.get("answered")),
            tokens_shared=bool(c.get("tokens_shared", False)),   # older bundles lack it
        ),
        histograms={k: histogram_from_dict(v) for k, v in d["histograms"].items()},
        kv_transfer=kv_transfer_from_dict(d["kv_transfer"]) if d.get("kv_transfer") is not None else None,
    )


def _member_to_dict(m: ProcessMember) -> dict:
    return {
        "pid": m.pid,
        "create_time": number(m.create_time),
        "role": m.role if m.role in ROLES else "other",
        "title": process_title(m.title),
        "status": safe_token(m.status, "unknown"),
        "rss_bytes": m.rss_bytes,
        "threads": m.threads,
        "cpu_percent": number(m.cpu_percent),
        **({"ppid": m.ppid} if m.ppid is not None else {}),   # older bundles lack it
    }


def _member_from_dict(d: Mapping) -> ProcessMember:
    return ProcessMember(pid=d["pid"], create_time=unnumber(d["create_time"]), role=d["role"],
                         title=d["title"], status=d["status"], rss_bytes=d["rss_bytes"],
                         threads=d["threads"], cpu_percent=unnumber(d["cpu_percent"]), ppid=d.get("ppid"))


def _log_fields(fields: Mapping[str, Any]) -> dict:
    out: dict[str, Any] = {}
    for key, value in sorted(fields.items()):
        if not isinstance(key, str) or not _KEY.match(key):
            continue
        if isinstance(value, bool) or isinstance(value, (int, float)):
            out[key] = number(value)
        elif isinstance(value, str) and key in LOG_STRING_KEYS and (
                _TOKEN.match(value) or grammar_literal(value)):
            out[key] = value
    return out


# The GPU fields a bundle keeps beside the first five (each optional: a bundle written before has none).
_GPU_NUMBERS = ("memory_utilization_pct", "sm_clock_mhz", "sm_clock_max_mhz", "memory_clock_mhz", "power_limit_w",
                "temperature_c", "clock_event_reasons", "ecc_volatile_corrected", "ecc_volatile_uncorrected",
                "ecc_aggregate_corrected", "ecc_aggregate_uncorrected", "remapped_rows_correctable",
                "remapped_rows_uncorrectable", "pcie_replay", "recovery_action", "nvlink_crc_errors",
                "nvlink_replay_errors", "nvlink_recovery_errors")
_GPU_FLAGS = ("remap_pending", "remap_failure")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")    # a pod's name (operator metadata)
_GPU_IDS = {"uuid": re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]{1,80}$"), "pci_bus_id": re.compile(r"^[0-9A-Fa-f:.]{1,32}$"),
            "name": re.compile(r"^[A-Za-z0-9 ._()+-]{1,64}$"), "pod": _K8S_NAME, "namespace": _K8S_NAME,
            "container": _K8S_NAME}


def _gpu_id(key: str, value: str | None) -> str | None:
    """A GPU's UUID, bus id, product name or pod labels when it has their shape; None otherwise (never free
    text)."""
    return value if isinstance(value, str) and _GPU_IDS[key].match(value) else None


def _gpu_device_to_dict(d: GpuDevice) -> dict:
    out = {"index": d.index, "utilization_pct": number(d.utilization_pct), "memory_used_bytes": d.memory_used_bytes,
           "memory_total_bytes": d.memory_total_bytes, "power_w": number(d.power_w),
           "processes": [{"pid": p.pid, "memory_used_bytes": p.memory_used_bytes,
                          **({"sm_util_pct": number(p.sm_util_pct)} if p.sm_util_pct is not None else {})}
                         for p in d.processes]}
    for key in _GPU_IDS:
        if (value := _gpu_id(key, getattr(d, key))) is not None:
            out[key] = value
    for key in _GPU_NUMBERS:
        if (value := getattr(d, key)) is not None:
            out[key] = number(value)
    for key in _GPU_FLAGS:
        if (value := getattr(d, key)) is not None:
            out[key] = bool(value)
    if d.lost:
        out["lost"] = True
    if d.unavailable:
        out["unavailable"] = {k: error_class(v) for k, v in d.unavailable if _TOKEN.match(k)}
    return out


def _gpu_device_from_dict(x: Mapping) -> GpuDevice:
    return GpuDevice(index=x["index"], utilization_pct=unnumber(x["utilization_pct"]),
                     memory_used_bytes=x["memory_used_bytes"], memory_total_bytes=x["memory_total_bytes"],
                     power_w=unnumber(x["power_w"]),
                     processes=tuple(GpuProcess(p["pid"], p["memory_used_bytes"], unnumber(p.get("sm_util_pct")))
                                     for p in x.get("processes", ())),
                     **{key: x.get(key) for key in _GPU_IDS},
                     **{key: unnumber(x.get(key)) for key in _GPU_NUMBERS},
                     **{key: x.get(key) for key in _GPU_FLAGS},
                     lost=bool(x.get("lost", False)),
                     unavailable=tuple(sorted(x.get("unavailable", {}).items())))


def sample_to_dict(s: Sample) -> dict:
    """One sample as an allow-listed dict with a "source" tag."""
    if isinstance(s, HealthSample):
        return {"source": "health", "t": number(s.t), "status": s.status, "latency_s": number(s.latency_s),
                "error": error_class(s.error)}
    if isinstance(s, MetricsSample):
        return {"source": "metrics", "t": number(s.t), "dialect": safe_token(s.dialect),
                "generation": safe_token(s.naming), "engines": [engine_to_dict(e) for e in s.engines],
                "scrape_s": number(s.scrape_s), "error": error_class(s.error)}
    if isinstance(s, ProcessSample):
        return {"source": "process", "t": number(s.t), "root_pid": s.root_pid,
                "root_create_time": number(s.root_create_time), "alive": s.alive,
                "members": [_member_to_dict(m) for m in s.members], "exit_code": s.exit_code,
                "exit_signal": s.exit_signal, "error": error_class(s.error)}
    if isinstance(s, GpuSample):
        out = {"source": "gpu", "t": number(s.t), "available": s.available,
               "devices": [_gpu_device_to_dict(d) for d in s.devices], "error": error_class(s.error)}
        if s.xids:
            out["xids"] = [{"t": number(x.t), "index": x.index, "xid": x.xid} for x in s.xids]
        if s.server_pod is not None and _K8S_NAME.match(s.server_pod):
            out["server_pod"] = s.server_pod
        return out
    if isinstance(s, LogEvent):
        return {"source": "log", "t": number(s.t), "kind": safe_token(s.kind), "fields": _log_fields(s.fields)}
    if isinstance(s, ProbeSample):
        return {"source": "probe", "t": number(s.t),
                "outcome": s.outcome if s.outcome in PROBE_OUTCOMES else "unavailable",
                "latency_s": number(s.latency_s), "deadline_s": number(s.deadline_s), "status": s.status,
                "tokens": s.tokens, "error": error_class(s.error),
                "engine": s.engine if s.engine is not None and s.engine.isdigit() else None}
    if isinstance(s, RequestsSample):
        return {"source": "requests", "t": number(s.t), "in_flight": s.in_flight,
                "waiting_first_token": s.waiting_first_token, "oldest_s": number(s.oldest_s),
                "oldest_waiting_s": number(s.oldest_waiting_s), "quiet_s": number(s.quiet_s),
                "ttft_p99_s": number(s.ttft_p99_s), "ttft_count": s.ttft_count,
                "expected_ttft_s": number(s.expected_ttft_s),
                "outcomes": {k: int(v) for k, v in s.outcomes.items() if k in REQUEST_OUTCOMES},
                "error": error_class(s.error)}
    if isinstance(s, SlotsSample):
        return {"source": "slots", "t": number(s.t), "elapsed_s": number(s.elapsed_s), "error": error_class(s.error),
                "slots": [_slot_to_dict(v) for v in s.slots]}
    kind = kinds.get(kinds.kind_of(s))              # a registered kind: field by field, as its codecs say
    return {"source": kind.name, **{name: _ENCODE[codec](getattr(s, name)) for name, codec in kind.codecs}}


# A slot's numbers, allow-listed (dialects.base.Slot holds nothing else: no prompt, text, task id or sampling setting).
_SLOT_COUNTS = ("n_ctx", "prompt_tokens", "prompt_processed", "prompt_cached", "decoded", "remaining")


def _slot_to_dict(view: SlotView) -> dict:
    slot = view.slot
    return {"id": int(slot.id), "busy": bool(slot.busy), "busy_s": number(view.busy_s),
            **{name: _int_or_none(getattr(slot, name)) for name in _SLOT_COUNTS}}


def _slot_from_dict(d: Mapping) -> SlotView:
    return SlotView(Slot(id=d["id"], busy=d["busy"], **{name: d[name] for name in _SLOT_COUNTS}),
                    unnumber(d["busy_s"]))


def _int_or_none(value) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _count(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DecodeError(f"not a count: {value!r}")
    return value


def _int(value) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise DecodeError(f"not an integer: {value!r}")
    return value


def _flag(value) -> bool:
    if not isinstance(value, bool):
        raise DecodeError(f"not true or false: {value!r}")
    return value


def _text(value) -> str | None:
    if value is not None and not isinstance(value, str):
        raise DecodeError(f"not a string: {value!r}")
    return value


# A registered kind's codecs (timeline.kinds): how a field is stored, and how it is read back.
_ENCODE = {kinds.TIME: number, kinds.NUMBER: number, kinds.COUNT: int, kinds.INT: _int_or_none, kinds.FLAG: bool,
           kinds.ERROR: error_class, kinds.TOKEN: safe_token}
_DECODE = {kinds.TIME: unnumber, kinds.NUMBER: unnumber, kinds.COUNT: _count, kinds.INT: _int, kinds.FLAG: _flag,
           kinds.ERROR: _text, kinds.TOKEN: _text}


def sample_from_dict(d: Mapping) -> Sample:
    try:
        source = d["source"]
        t = unnumber(d["t"])
        if source == "health":
            return HealthSample(t=t, status=d["status"], latency_s=unnumber(d["latency_s"]), error=d["error"])
        if source == "metrics":
            return MetricsSample(t=t, dialect=d["dialect"], naming=d["generation"],
                                 engines=tuple(engine_from_dict(e) for e in d["engines"]),
                                 scrape_s=unnumber(d["scrape_s"]), error=d["error"])
        if source == "process":
            return ProcessSample(t=t, root_pid=d["root_pid"], root_create_time=unnumber(d["root_create_time"]),
                                 alive=d["alive"], members=tuple(_member_from_dict(m) for m in d["members"]),
                                 exit_code=d["exit_code"], exit_signal=d["exit_signal"], error=d["error"])
        if source == "gpu":
            return GpuSample(t=t, available=d["available"], devices=tuple(_gpu_device_from_dict(x) for x in d["devices"]),
                             error=d["error"], xids=tuple(GpuXid(unnumber(x["t"]), x["index"], x["xid"])
                                                          for x in d.get("xids", ())),
                             server_pod=d.get("server_pod"))
        if source == "log":
            return LogEvent(t=t, kind=d["kind"], fields={k: unvalue(v) for k, v in d["fields"].items()})
        if source == "probe":
            return ProbeSample(t=t, outcome=d["outcome"], latency_s=unnumber(d["latency_s"]),
                               deadline_s=unnumber(d["deadline_s"]), status=d["status"], tokens=d["tokens"],
                               error=d["error"], engine=d.get("engine"))
        if source == "requests":
            return RequestsSample(t=t, in_flight=d["in_flight"], waiting_first_token=d["waiting_first_token"],
                                  oldest_s=unnumber(d["oldest_s"]), oldest_waiting_s=unnumber(d["oldest_waiting_s"]),
                                  quiet_s=unnumber(d["quiet_s"]), ttft_p99_s=unnumber(d["ttft_p99_s"]),
                                  ttft_count=d["ttft_count"], expected_ttft_s=unnumber(d["expected_ttft_s"]),
                                  outcomes=dict(d["outcomes"]), error=d["error"])
        if source == "slots":
            return SlotsSample(t=t, slots=tuple(_slot_from_dict(v) for v in d["slots"]),
                               elapsed_s=unnumber(d["elapsed_s"]), error=d["error"])
        if (kind := kinds.get(source)) is not None and kind.codecs:
            return kind.sample(**{name: _DECODE[codec](d[name]) for name, codec in kind.codecs})
    except (KeyError, TypeError) as exc:
        raise DecodeError(f"malformed {d.get('source', '?')} sample: {exc}") from None
    raise DecodeError(f"unknown sample source {source!r}")


# --- verdicts ---------------------------------------------------------------------------------

_DETAIL = re.compile(r"^[A-Za-z0-9_.:+=,-]{1,128}$")
_FIELD = re.compile(r"^[A-Za-z0-9_.:\[\]-]{1,128}$")     # e.g. "counters.steps", "members[4243].status"
_PRIVATE_WORD = re.compile(r"[/?@\\]")
# Words with a slash that are not private: the server's well-known endpoints and per-second units.
_PUBLIC_SLASH_WORD = re.compile(r"^\(?(/(health|metrics|version|ready)|[A-Za-z]+/s)[,.;:)]*$")


def _detail_value(value: Any) -> Any:
    if isinstance(value, str):
        return value if _DETAIL.match(value) else "redacted"
    return number(value)


def scrub_text(text: str, limit: int = 400) -> str:
    """One line; any word that could be a path, URL, query or address becomes "[redacted]"."""
    words = ["[redacted]" if _PRIVATE_WORD.search(w) and not _PUBLIC_SLASH_WORD.match(w) else w
             for w in str(text).split()]
    return " ".join(words)[:limit]


def evidence_to_dict(e: Evidence) -> dict:
    value = e.value
    return {"source": e.source if kinds.get(e.source) is not None else "redacted", "t": number(e.t),
            "field": e.field if _FIELD.match(e.field) else "redacted",
            "value": _detail_value(value) if isinstance(value, str) else number(value)}


def evidence_from_dict(d: Mapping) -> Evidence:
    return Evidence(source=d["source"], t=unnumber(d["t"]), field=d["field"], value=unvalue(d["value"]))


def verdict_to_dict(v: Verdict) -> dict:
    return {
        "name": v.name if registry.spec(v.name) is not None else "redacted",
        "action": registry.action_for(v),        # this firing's action class, as its JSON line and probes said it
        "t": number(v.t),
        "onset": number(v.onset),
        "why": scrub_text(v.why),
        "evidence": [evidence_to_dict(e) for e in v.evidence],
        "details": {k: _detail_value(x) for k, x in sorted(v.details.items()) if isinstance(k, str) and _KEY.match(k)},
    }


def verdict_from_dict(d: Mapping) -> Verdict:
    try:
        details = {k: unvalue(x) for k, x in d["details"].items()}
        action = d.get("action")             # absent in a bundle written before firings carried their own
        spec = registry.spec(d["name"])
        own = action if action in ACTION_CLASSES and (action != registry.action_of(d["name"]) or
                                                      (spec is not None and spec.action_by)) else None
        return Verdict(name=d["name"], t=unnumber(d["t"]), onset=unnumber(d["onset"]), why=d["why"],
                       evidence=tuple(evidence_from_dict(e) for e in d["evidence"]), details=details, action=own)
    except (KeyError, TypeError, DecodeError) as exc:
        raise DecodeError(f"malformed verdict: {exc}") from None


def samples_to_dicts(samples: Iterable[Sample]) -> list[dict]:
    return [sample_to_dict(s) for s in samples]


def config_to_dict(config: Any) -> dict:
    """A detector configuration (a dataclass of scalars, or a mapping) as a flat dict of numbers/strings."""
    import dataclasses

    if config is None:
        return {}
    if dataclasses.is_dataclass(config):
        items = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    else:
        items = dict(config)
    out: dict[str, Any] = {}
    for key, value in sorted(items.items()):
        if not _KEY.match(key):
            continue
        if isinstance(value, str):
            out[key] = value if _TOKEN.match(value) else "redacted"
        elif value is None or isinstance(value, (bool, int, float)):
            out[key] = number(value)
        elif isinstance(value, (tuple, list)) and all(isinstance(x, (int, float)) for x in value):
            out[key] = [number(x) for x in value]
        elif isinstance(value, (tuple, list)) and all(isinstance(x, str) and _TOKEN.match(x) for x in value):
            out[key] = list(value)
    return out
