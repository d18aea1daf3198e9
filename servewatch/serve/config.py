"""What `serve` runs with (`ServeConfig`): from a YAML file, then the command line on top.

    listen: 127.0.0.1:9464        # the HTTP surface (loopback unless said otherwise)
    interval: 2s                  # each target's health and scrape cadence
    probe: true                   # the active one-token probe of an idle target (default on; false turns it off)
    probe_interval: 10s           # at most one probe per target per this long: 360 requests an hour when idle
    probe_deadline: 10s           # fixed; without it, learned from the target's own answers (3-10 s)
    history: 10m                  # how much timeline each target keeps
    out: /var/lib/servewatch      # incident bundles, one directory per target
    bundle_cap_mb: 1024           # all targets' bundles together; the oldest go first
    alertmanager: http://alertmanager:9093   # a live sink, by its registered name (servewatch.sinks.delivery.registry)
    webhook: http://hooks.example/servewatch
    shard: 0/3
    gpu_metrics: http://127.0.0.1:9400/metrics   # this node's dcgm-exporter: the GPUs of the targets on this node
                                  #   (a pid, or a loopback URL) when NVML cannot be loaded here
    targets:
      - url: http://10.0.0.7:8000
        name: llama-a             # optional; host:port otherwise
        gpu_metrics: http://10.0.0.7:9400/metrics   # optional: its GPUs from that dcgm-exporter, in NVML's place
        proxy:                    # optional: a sidecar `servewatch proxy` in front of this target
          listen: 0.0.0.0:8080    #   clients connect here (a string alone is the listen address)
          records: /var/log/servewatch/llama-a.jsonl   # one JSON line per request (optional)
          keep_itl: false         #   true: every inter-token gap in the records (optional)
      - name: pair-a              # a disaggregated deployment watched as one target (issue 52): each instance on
        prefill: [http://10.0.0.8:8100]      #   its own timeline, the pair's verdicts judged together; livez and
        decode: [http://10.0.0.9:8200]       #   readyz take ?instance=HOST:PORT (one side's), readyz without it the pair's
    file_sd:
      - /etc/servewatch/targets/*.json
    prometheus_sd:                # the fleet's Prometheus as discovery: its active targets of a job
      url: http://prometheus:9090
      job: vllm
      labels: {namespace: inference}
      refresh: 30s
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from servewatch.errors import ServewatchError
from servewatch.serve.document import read_document
from servewatch.serve.prometheus_sd import PrometheusSdConfig
from servewatch.serve.targets import ProxySpec, Shard, TargetSpec, check_gpu_metrics_url, parse_shard, spec_for
from servewatch.sinks.bundle_sink import check_writable
from servewatch.sinks.delivery.registry import sink_names
from servewatch.transport.urls import check as check_url
from servewatch.watch.options import RecordingOptions
from servewatch.words import duration_s as duration

# How every target is recorded unless the config or the command line says otherwise: as `watch` records one
# (the same detectors), at a 2 s cadence, with the active probe on: an idle replica wedged with empty gauges
# is invisible to every passive reader. Cost: one 1-token request per idle target per probe_interval.
# Each target puts in its own URL, log file and GPU choice (serve.fleet).
FLEET_RECORDING = RecordingOptions(url="", interval=2.0, probe=True)
# The shared recording flags serve takes (servewatch.watch.options); --out is serve's own (a directory per target).
RECORDING_FLAGS = ("interval", "probe", "probe_interval", "probe_deadline", "history", "detector_settings",
                   "detectors_file")
DEFAULT_LISTEN = "127.0.0.1:9464"
_BEFORE_SINKS = ("listen", "interval", "history", "out", "bundle_cap_mb")        # the keys, in the order said
_AFTER_SINKS = ("shard", "targets", "file_sd", "prometheus_sd", "node", "gpu_metrics", "probe", "probe_interval",
                "probe_deadline")
_SD_KEYS = ("url", "job", "labels", "refresh")
_TARGET_KEYS = ("url", "name", "pid", "log_file", "proxy", "gpu_metrics", "prefill", "decode")
_PROXY_KEYS = ("listen", "records", "records_max_mb", "records_keep", "max_connections", "first_byte_timeout",
               "read_timeout", "tenant_header", "tenant_key_file", "keep_itl")


@dataclass(frozen=True)
class ServeConfig:
    targets: tuple[TargetSpec, ...] = ()
    file_sd: tuple[str, ...] = ()          # paths or globs (in the last part), re-read on change
    listen: str = DEFAULT_LISTEN
    recording: RecordingOptions = FLEET_RECORDING   # cadence, history, thresholds and probe, the same for every target
    out: str | None = None
    sinks: dict[str, str] = field(default_factory=dict)   # sink name -> URL (servewatch.sinks.delivery.registry)
    shard: Shard = field(default_factory=lambda: Shard(0, 1))
    prometheus_sd: PrometheusSdConfig | None = None
    bundle_cap_bytes: int = 1024 * 2**20         # all targets' bundles under `out` together
    node: str | None = None       # the node-local view under this node name (serve.node): engines found by title
    # This node's dcgm-exporter (/metrics URL): the GPUs of every target on this node (a pid, or a loopback URL)
    # that names no exporter of its own, when NVML cannot be loaded here (serve.fleet says which, once, at start).
    gpu_metrics: str | None = None


def load(path: str) -> ServeConfig:
    """Raises a DocumentError naming file, line and key."""
    doc = read_document(path)
    value = doc.value if doc.value is not None else {}
    if not isinstance(value, dict):
        raise doc.error((), "the config is a mapping (listen, interval, targets, file_sd, ...)")
    keys = (*_BEFORE_SINKS, *sink_names(), *_AFTER_SINKS)       # every registered live sink is a key
    for key in value:
        if key not in keys:
            raise doc.error((key,), f"unknown key (known: {', '.join(keys)})")

    def text(key: str) -> str | None:
        item = value.get(key)
        if item is not None and not isinstance(item, str):
            raise doc.error((key,), "a string is expected")
        return item

    def seconds(key: str, default: float) -> float:
        item = value.get(key)
        if item is None:
            return default
        try:
            return duration(str(item))
        except ValueError as exc:
            raise doc.error((key,), str(exc)) from None

    targets = []
    for i, entry in enumerate(value.get("targets") or ()):
        entry = {"url": entry} if isinstance(entry, str) else entry
        if not isinstance(entry, dict):
            raise doc.error(("targets", i), "a URL or a mapping with url (name, pid, log_file optional)")
        for key in entry:
            if key not in _TARGET_KEYS:
                raise doc.error(("targets", i, key), f"unknown key (known: {', '.join(_TARGET_KEYS)})")
        if "prefill" in entry or "decode" in entry:
            targets.append(_deployment(doc, i, entry))
            continue
        if not isinstance(entry.get("url"), str):
            raise doc.error(("targets", i, "url"), "a URL is required")
        try:                    # the one URL checker (servewatch.transport.urls), as for --target
            check_url(entry["url"])
        except ServewatchError as exc:
            raise doc.error(("targets", i, "url"), str(exc)) from None
        pid = entry.get("pid")
        if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0):
            raise doc.error(("targets", i, "pid"), "a process id (a positive integer) is expected")
        proxy = _proxy(doc, ("targets", i, "proxy"), entry.get("proxy"), entry["url"], duration)
        who = entry.get("name") if isinstance(entry.get("name"), str) else entry["url"]
        gpu_metrics = _gpu_metrics(doc, ("targets", i, "gpu_metrics"), entry.get("gpu_metrics"), f"target {who}: ")
        try:
            targets.append(spec_for(entry["url"], entry.get("name"), pid, entry.get("log_file"), proxy, gpu_metrics))
        except ServewatchError as exc:
            raise doc.error(("targets", i, "url" if "name" not in str(exc) else "name"), str(exc)) from None
    file_sd = value.get("file_sd") or ()
    if isinstance(file_sd, str):
        file_sd = (file_sd,)
    if not isinstance(file_sd, (list, tuple)) or not all(isinstance(p, str) for p in file_sd):
        raise doc.error(("file_sd",), "a list of file paths is expected")
    shard = Shard(0, 1)
    if value.get("shard") is not None:
        try:
            shard = parse_shard(str(value["shard"]))
        except ServewatchError as exc:
            raise doc.error(("shard",), str(exc).removeprefix("--shard ")) from None
    probe = value.get("probe", FLEET_RECORDING.probe)
    if not isinstance(probe, bool):
        raise doc.error(("probe",), "true or false is expected")
    cap = value.get("bundle_cap_mb", 1024)
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap < math.inf:
        raise doc.error(("bundle_cap_mb",), "a positive number of MiB is expected")
    return ServeConfig(bundle_cap_bytes=int(cap * 2**20), targets=tuple(targets), file_sd=tuple(file_sd), listen=text("listen") or DEFAULT_LISTEN,
                       node=text("node"),
                       gpu_metrics=_gpu_metrics(doc, ("gpu_metrics",), value.get("gpu_metrics"), ""),
                       prometheus_sd=_prometheus_sd(doc, value.get("prometheus_sd"), duration),
                       recording=replace(FLEET_RECORDING, probe=probe,
                                         interval=seconds("interval", FLEET_RECORDING.interval),
                                         history_s=seconds("history", FLEET_RECORDING.history_s),
                                         probe_interval_s=seconds("probe_interval", FLEET_RECORDING.probe_interval_s),
                                         probe_deadline=seconds("probe_deadline", FLEET_RECORDING.probe_deadline)),
                       out=text("out"), sinks={name: url for name in sink_names() if (url := text(name))}, shard=shard)


def _deployment(doc, i: int, entry: dict) -> TargetSpec:
    """A target that is a disaggregated pair: `prefill: [urls]` and `decode: [urls]` (a name optional; no url, pid,
    log_file, proxy or gpu_metrics: each instance is read from its URL)."""
    from servewatch.watch.deployment import members_from

    for key in entry:
        if key not in ("name", "prefill", "decode"):
            raise doc.error(("targets", i, key), "a deployment takes name, prefill and decode only")
    urls = {}
    for role in ("prefill", "decode"):
        value = entry.get(role)
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not value or not all(isinstance(u, str) for u in value):
            raise doc.error(("targets", i, role), f"a list of the {role} instances' URLs is expected")
        urls[role] = tuple(value)
    try:
        members = members_from(urls["prefill"], urls["decode"])
        spec = spec_for(members[0].url, entry.get("name") or f"pair-{members[0].name}")
    except ServewatchError as exc:
        raise doc.error(("targets", i), str(exc)) from None
    return replace(spec, prefill=tuple(m.url for m in members if m.role == "prefill"),
                   decode=tuple(m.url for m in members if m.role == "decode"))


def _gpu_metrics(doc, at: tuple, value, who: str) -> str | None:
    """A `gpu_metrics:` value: dcgm-exporter's /metrics URL (one line naming the key and target otherwise)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise doc.error(at, f"{who}dcgm-exporter's /metrics URL is expected (e.g. http://127.0.0.1:9400/metrics)")
    try:
        return check_gpu_metrics_url(value)
    except ServewatchError as exc:
        raise doc.error(at, f"{who}{exc}") from None


def _proxy(doc, at: tuple, value, url: str, duration) -> ProxySpec | None:
    """A target's `proxy:`: a listen address, or a mapping with listen (and records, limits, timeouts)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = {"listen": value}
    if not isinstance(value, dict):
        raise doc.error(at, "a listen address (HOST:PORT) or a mapping with listen (records, limits optional)")
    for key in value:
        if key not in _PROXY_KEYS:
            raise doc.error((*at, key), f"unknown key (known: {', '.join(_PROXY_KEYS)})")
    if not url.startswith("http://"):
        raise doc.error((*at,), "the proxy forwards to a plain http:// URL only")
    listen = value.get("listen")
    if not isinstance(listen, str):
        raise doc.error((*at, "listen"), "HOST:PORT is required, e.g. 0.0.0.0:8080")
    try:
        parse_listen(listen, "listen")
    except ServewatchError as exc:
        raise doc.error((*at, "listen"), str(exc).removeprefix("listen ")) from None
    records = value.get("records")
    if records is not None and not isinstance(records, str):
        raise doc.error((*at, "records"), "a file path is expected")
    header = value.get("tenant_header", "x-tenant")
    if not isinstance(header, str) or not header:
        raise doc.error((*at, "tenant_header"), "a header name is expected")
    key_file = value.get("tenant_key_file")
    if key_file is not None and not (isinstance(key_file, str) and key_file):
        raise doc.error((*at, "tenant_key_file"), "a file path is expected")
    keep_itl = value.get("keep_itl", False)
    if not isinstance(keep_itl, bool):
        raise doc.error((*at, "keep_itl"), "true or false is expected")
    numbers = {}
    for key, default, whole in (("records_max_mb", 64.0, False), ("records_keep", 3, True),
                                ("max_connections", 4096, True)):
        item = value.get(key, default)
        if isinstance(item, bool) or not isinstance(item, int if whole else (int, float)) or item <= 0:
            raise doc.error((*at, key), f"a positive {'whole ' if whole else ''}number is expected")
        numbers[key] = item
    for key, default in (("first_byte_timeout", 900.0), ("read_timeout", 300.0)):
        item = value.get(key)
        try:
            numbers[key] = default if item is None else duration(str(item))
        except ValueError as exc:
            raise doc.error((*at, key), str(exc)) from None
    return ProxySpec(listen=listen, records=records, records_max_mb=float(numbers["records_max_mb"]),
                     records_keep=numbers["records_keep"], max_connections=numbers["max_connections"],
                     first_byte_timeout_s=numbers["first_byte_timeout"], read_timeout_s=numbers["read_timeout"],
                     tenant_header=header.lower(), tenant_key_file=key_file, keep_itl=keep_itl)


def _prometheus_sd(doc, value, duration) -> PrometheusSdConfig | None:
    if value is None:
        return None
    at = ("prometheus_sd",)
    if not isinstance(value, dict):
        raise doc.error(at, "a mapping with url (job, labels, refresh optional)")
    for key in value:
        if key not in _SD_KEYS:
            raise doc.error((*at, key), f"unknown key (known: {', '.join(_SD_KEYS)})")
    url = value.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise doc.error((*at, "url"), "the Prometheus server's http(s) URL is required")
    job = value.get("job")
    if job is not None and not isinstance(job, str):
        raise doc.error((*at, "job"), "a string is expected")
    labels = value.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise doc.error((*at, "labels"), "a mapping of label names to strings is expected")
    refresh = 30.0
    if value.get("refresh") is not None:
        try:
            refresh = duration(str(value["refresh"]))
        except ValueError as exc:
            raise doc.error((*at, "refresh"), str(exc)) from None
    return PrometheusSdConfig(url, job, {str(k): v for k, v in labels.items()}, refresh)


@dataclass(frozen=True)
class ServeFlags:
    """What serve's command line said, typed (servewatch.commands.serve reads it off the parser): each option given
    goes over the config file's value; `targets`, `file_sd`, `proxies` and `gpu_metrics` add. None or empty: not
    given."""
    targets: tuple[str, ...] = ()               # --target [NAME=]URL
    proxies: tuple[str, ...] = ()               # --proxy NAME=HOST:PORT
    gpu_metrics: tuple[str, ...] = ()           # --gpu-metrics [NAME=]URL
    file_sd: tuple[str, ...] = ()
    listen: str | None = None
    out: str | None = None
    sinks: Mapping[str, str] = field(default_factory=dict)    # sink name -> URL, the ones given
    recording: RecordingOptions | None = None   # the recording flags laid over the file's recording
    bundle_cap_mib: float | None = None
    shard: str | None = None                    # "I/N"
    prometheus_sd: str | None = None
    prometheus_sd_job: str | None = None
    node: str | None = None


def overlaid(config: ServeConfig, flags: ServeFlags) -> ServeConfig:
    """`config` (the file's, or the defaults) with the command line's `flags` over it, checked. Raises
    ServewatchError naming the option or value that is wrong."""
    changes: dict = {}
    if flags.targets:
        changes["targets"] = config.targets + tuple(target_from_arg(text) for text in flags.targets)
    if flags.proxies:
        changes["targets"] = _with_proxies(changes.get("targets", config.targets), list(flags.proxies))
    for text in flags.gpu_metrics:
        changes = {**changes, **_with_gpu_metrics(changes.get("targets", config.targets), text)}
    if flags.file_sd:
        changes["file_sd"] = config.file_sd + tuple(flags.file_sd)
    for key in ("listen", "out"):
        if getattr(flags, key) is not None:
            changes[key] = getattr(flags, key)
    if flags.sinks:
        changes["sinks"] = {**config.sinks, **flags.sinks}
    if flags.recording is not None:
        changes["recording"] = flags.recording
    if flags.bundle_cap_mib is not None:
        if not 0 < flags.bundle_cap_mib < math.inf:      # NaN too
            raise ServewatchError(f"--bundle-cap {flags.bundle_cap_mib:g}: must be a number of MiB more than zero")
        changes["bundle_cap_bytes"] = int(flags.bundle_cap_mib * 2**20)
    if flags.shard is not None:
        changes["shard"] = parse_shard(flags.shard)
    config = replace(config, **changes)
    if flags.prometheus_sd:
        config = replace(config, prometheus_sd=PrometheusSdConfig(flags.prometheus_sd, flags.prometheus_sd_job))
    if flags.node:
        config = replace(config, node=flags.node)
    if config.node is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", config.node):
        raise ServewatchError(f"--node {config.node!r}: a node name (letters, digits, '.', '_', '-') is expected")
    if not config.targets and not config.file_sd and config.prometheus_sd is None and config.node is None:
        raise ServewatchError("no targets: give --target URL, --file-sd FILE, --prometheus-sd URL, --node NAME or a "
                              "--config with targets, file_sd, prometheus_sd or node")
    if config.prometheus_sd is not None and not config.prometheus_sd.url.startswith(("http://", "https://")):
        raise ServewatchError(f"--prometheus-sd {config.prometheus_sd.url!r}: not an http(s) URL")
    for url in config.sinks.values():
        if url is not None and not url.startswith(("http://", "https://")):
            raise ServewatchError(f"{url!r}: not an http(s) URL")
    parse_listen(config.listen)
    if config.out:
        check_writable(config.out)
    return config


def _with_gpu_metrics(targets: tuple[TargetSpec, ...], text: str) -> dict:
    """--gpu-metrics NAME=URL: the target named NAME reads its GPUs from that dcgm-exporter; --gpu-metrics URL:
    this node's exporter (ServeConfig.gpu_metrics). The changes to the config, as a dict."""
    name, sep, url = text.partition("=")
    if not sep or "/" in name or ":" in name:
        name, url = None, text
    try:
        url = check_gpu_metrics_url(url)
    except ServewatchError as exc:
        raise ServewatchError(f"--gpu-metrics {exc}") from None
    if name is None:
        return {"gpu_metrics": url}
    by_name = {t.name: t for t in targets}
    if name not in by_name:
        known = ", ".join(sorted(by_name)) or "none"
        raise ServewatchError(f"--gpu-metrics {text!r}: no target named {name} (targets: {known})")
    return {"targets": tuple(replace(t, gpu_metrics=url) if t.name == name else t for t in targets)}


def _with_proxies(targets: tuple[TargetSpec, ...], texts: list[str]) -> tuple[TargetSpec, ...]:
    """--proxy NAME=HOST:PORT: a sidecar proxy in front of the target named NAME."""
    by_name = {t.name: t for t in targets}
    for text in texts:
        name, sep, listen = text.partition("=")
        if not sep or not name:
            raise ServewatchError(f"--proxy {text!r}: expected NAME=HOST:PORT (NAME a --target's name)")
        if name not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            raise ServewatchError(f"--proxy {text!r}: no target named {name} (targets: {known})")
        parse_listen(listen, "--proxy")
        if not by_name[name].url.startswith("http://"):
            raise ServewatchError(f"--proxy {text!r}: the proxy forwards to a plain http:// URL only")
        by_name[name] = replace(by_name[name], proxy=ProxySpec(listen=listen))
    return tuple(by_name[t.name] for t in targets)


def target_from_arg(text: str) -> TargetSpec:
    """--target URL, or --target NAME=URL to name it (the name is the `target` label and the probe path)."""
    from servewatch.transport.urls import BadUrl

    name, sep, url = text.partition("=")
    try:
        if sep and "/" not in name and ":" not in name:
            return spec_for(url, name)
        return spec_for(text)
    except BadUrl as exc:       # the one URL checker's line (servewatch.transport.urls), the flag named
        raise BadUrl(f"--target {text!r}: {exc.reason}") from None


def parse_listen(text: str, flag: str = "--listen") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ServewatchError(f"{flag} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    return host.strip("[]") or "127.0.0.1", int(port)
