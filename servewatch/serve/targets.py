"""The fleet's targets: what one is (`TargetSpec`), Prometheus file_sd files, duplicates merged, and the
shard a target belongs to."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from servewatch.errors import ServewatchError
from servewatch.serve.document import Document, read_document
from servewatch.bundle.serialize import safe_token
from servewatch.watch.targets import base_url


@dataclass(frozen=True)
class ProxySpec:
    """A target's sidecar proxy: `servewatch proxy` run inside serve, its requests one more source of the
    target's recorder."""
    listen: str                             # HOST:PORT where clients connect
    records: str | None = None              # one JSON line per request (rotated by size)
    records_max_mb: float = 64.0
    records_keep: int = 3
    max_connections: int = 4096
    first_byte_timeout_s: float = 900.0
    read_timeout_s: float = 300.0
    tenant_header: str = "x-tenant"
    tenant_key_file: str | None = None      # the tenant hash's secret key (servewatch.proxy.config.tenant_key)
    keep_itl: bool = False                  # records carry every inter-token gap (prompt text: never here)


@dataclass(frozen=True)
class TargetSpec:
    name: str                       # the `target` label: a short token (host:port unless named)
    url: str                        # scheme://host:port
    pid: int | None = None          # a local target's API server PID (process tree, exit detection)
    log_file: str | None = None     # a local target's log, tailed
    proxy: ProxySpec | None = None  # a sidecar proxy in front of it (config targets only)
    gpu_metrics: str | None = None  # dcgm-exporter's /metrics URL: this target's GPUs from there, in NVML's place
    # A deployment (config targets only): the prefill and decode instances of a disaggregated pair, watched as one
    # target (servewatch.watch.deployment); `url` is then its first prefill's.
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()


LOOPBACK_HOSTS = ("localhost", "::1")


def on_this_node(spec: TargetSpec) -> bool:
    """A target running on the machine serve runs on: a PID was given, or its URL is a loopback address."""
    from urllib.parse import urlsplit

    if spec.pid is not None:
        return True
    host = (urlsplit(spec.url).hostname or "").lower()
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def check_gpu_metrics_url(url: str) -> str:
    """dcgm-exporter's /metrics URL as given (a bare http://HOST:PORT gets /metrics); raises ServewatchError
    (the reason, without the key) when it is not an http(s) URL with a host."""
    from servewatch.transport.urls import BadUrl, parse

    try:
        parsed = parse(url) if "://" in url else None     # the one URL checker; a scheme is required here
    except BadUrl:
        parsed = None
    if parsed is None:
        raise ServewatchError(f"{url!r}: not an http(s) URL of dcgm-exporter's page "
                              "(write e.g. http://127.0.0.1:9400/metrics)")
    return url if parsed.path not in ("", "/") else url.rstrip("/") + "/metrics"


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def owns(self, target: TargetSpec) -> bool:
        """A stable hash of the URL: the same target lands on the same shard in every replica."""
        digest = hashlib.sha256(target.url.encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index


def parse_shard(text: str) -> Shard:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ServewatchError(f"--shard {text!r}: expected I/N, e.g. 0/3") from None
    if count < 1 or not 0 <= index < count:
        raise ServewatchError(f"--shard {text!r}: I must be in 0..N-1")
    return Shard(index, count)


def target_name(url: str, name: str | None = None) -> str:
    if name is not None:
        token = safe_token(name, None)
        if token is None:
            raise ServewatchError(f"target name {name!r}: use letters, digits and . _ : + - (at most 64)")
        return token
    return safe_token(url.split("://", 1)[1], "target") or "target"


def spec_for(url: str, name: str | None = None, pid: int | None = None, log_file: str | None = None,
             proxy: ProxySpec | None = None, gpu_metrics: str | None = None) -> TargetSpec:
    base = base_url(url)
    return TargetSpec(target_name(base, name), base, pid, log_file, proxy, gpu_metrics)


def merge(specs: Iterable[TargetSpec]) -> tuple[list[TargetSpec], list[str]]:
    """Duplicates (the same URL, or the same name) kept once; a line for each one dropped."""
    kept: dict[str, TargetSpec] = {}
    names: set[str] = set()
    said: list[str] = []
    for spec in specs:
        if spec.url in kept:
            said.append(f"{spec.url} is listed more than once; watched once")
            continue
        if spec.name in names:
            said.append(f"target name {spec.name} is used by two URLs; {spec.url} is not watched")
            continue
        kept[spec.url] = spec
        names.add(spec.name)
    return list(kept.values()), said


def read_file_sd(path: str, text: str | None = None) -> list[TargetSpec]:
    """A Prometheus file_sd file (JSON or YAML): a list of {"targets": ["host:port", ...], "labels": {...}}.
    The label __scheme__ picks http or https; other labels are not exported (they are the fleet's, and
    servewatch's metrics keep one `target` label). Raises DocumentError naming file, line and key."""
    doc = read_document(path, text)
    if doc.value is None:
        return []
    if not isinstance(doc.value, list):
        raise doc.error((), "a file_sd file is a list of target groups")
    specs = []
    for i, group in enumerate(doc.value):
        if not isinstance(group, dict):
            raise doc.error((i,), "a target group is a mapping with `targets` and optional `labels`")
        unknown = set(group) - {"targets", "labels"}
        if unknown:
            raise doc.error((i, sorted(unknown)[0]), "unknown key (a group has `targets` and `labels`)")
        labels = group.get("labels") or {}
        if not isinstance(labels, dict):
            raise doc.error((i, "labels"), "labels are a mapping of names to strings")
        scheme = labels.get("__scheme__", "http")
        if scheme not in ("http", "https"):
            raise doc.error((i, "labels", "__scheme__"), f"{scheme!r} is not http or https")
        targets = group.get("targets")
        if not isinstance(targets, list):
            raise doc.error((i, "targets"), "a list of host:port strings is required")
        for j, address in enumerate(targets):
            specs.append(_file_sd_target(doc, (i, "targets", j), address, scheme))
    return specs


def _file_sd_target(doc: Document, at: tuple, address, scheme: str) -> TargetSpec:
    if not isinstance(address, str) or "://" in address or "/" in address or not address.strip():
        raise doc.error(at, f"{address!r} is not host:port")
    try:
        return spec_for(f"{scheme}://{address.strip()}")
    except ServewatchError as exc:
        raise doc.error(at, str(exc)) from None
