"""serve's pure parts: the config and file_sd files (errors name file, line and key), reloads that keep
the last good set, duplicates, the stable shard hash, backoff, the derived signals and probe answers."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from servewatch.commands.serve import config_from_args
from servewatch.engine.state import Counters, EngineState
from servewatch.errors import ServewatchError
from servewatch.serve import config as serve_config
from servewatch.serve import probes
from servewatch.serve.discovery import FileSd
from servewatch.serve.fleet import BACKOFF_AFTER, BACKOFF_CAP_S, backoff_delay
from servewatch.serve import signals as signals_module
from servewatch.serve.signals import Columns, signals
from servewatch.serve.targets import Shard, merge, parse_shard, read_file_sd, spec_for
from servewatch.timeline.samples import MetricsSample
from servewatch.timeline.window import Window


def test_config_file_is_read(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text("listen: 0.0.0.0:9000\ninterval: 500ms\nhistory: 5m\nshard: 1/3\n"
                    "targets:\n  - url: http://10.0.0.7:8000/metrics\n    name: llama-a\n    pid: 42\n"
                    "  - http://10.0.0.8:8000\nfile_sd:\n  - /etc/sd/*.json\n")
    cfg = serve_config.load(str(path))
    assert cfg.listen == "0.0.0.0:9000" and cfg.recording.interval == 0.5 and cfg.recording.history_s == 300.0
    assert cfg.shard == Shard(1, 3) and cfg.file_sd == ("/etc/sd/*.json",)
    assert [(t.name, t.url, t.pid) for t in cfg.targets] == [("llama-a", "http://10.0.0.7:8000", 42),
                                                             ("10.0.0.8:8000", "http://10.0.0.8:8000", None)]
    assert (cfg.recording.probe, cfg.recording.probe_interval_s, cfg.recording.probe_deadline) == (True, 10.0, None)   # on by default in a fleet, its deadline learned


def test_the_probe_is_set_in_the_config_and_turned_off_on_the_command_line(tmp_path):
    import argparse

    from servewatch.commands import add_command, serve

    path = tmp_path / "serve.yaml"
    path.write_text("probe_interval: 1m\nprobe_deadline: 5s\ntargets: [http://10.0.0.8:8000]\n")
    cfg = serve_config.load(str(path))
    assert (cfg.recording.probe, cfg.recording.probe_interval_s, cfg.recording.probe_deadline) == (True, 60.0, 5.0)
    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers(), serve)
    args = parser.parse_args(["serve", "--config", str(path), "--no-probe", "--probe-deadline", "3s"])
    cfg = config_from_args(args)
    assert (cfg.recording.probe, cfg.recording.probe_interval_s, cfg.recording.probe_deadline) == (False, 60.0, 3.0)
    path.write_text("probe: maybe\n")
    with pytest.raises(ServewatchError, match=":1: probe: true or false"):
        serve_config.load(str(path))


@pytest.mark.parametrize("text, expected", [
    ("targets:\n  - url: http://a:1\n    colour: red\n", ":3: targets[0].colour: unknown key"),
    ("targets:\n  - url: ftp://a:1\n", ":2: targets[0].url: 'ftp://a:1': not an http(s) URL"),
    ("targets:\n  - url: not-a-url\n", ":2: targets[0].url: 'not-a-url': not an http(s) URL (write http://HOST:PORT)"),
    ("targets:\n  - not-a-url\n", ":2: targets[0].url: 'not-a-url': not an http(s) URL"),
    ("interval: soon\n", ":1: interval: 'soon' is not a duration"),
    ("listen: 1\nlisten2: x\n", ":2: listen2: unknown key"),
    ("targets:\n  - url: http://a:1\n    pid: -3\n", ":3: targets[0].pid: a process id"),
    ("targets: [\n", ":2: document: not valid YAML/JSON" ),
    ("shard: 3/3\n", ":1: shard: '3/3': I must be in 0..N-1"),
])
def test_config_errors_name_file_line_and_key(tmp_path, text, expected):
    path = tmp_path / "serve.yaml"
    path.write_text(text)
    with pytest.raises(ServewatchError) as error:
        serve_config.load(str(path))
    message = str(error.value)
    assert message.startswith(str(path)) and "\n" not in message
    assert expected.replace(": document", "") in message or expected in message, message


@pytest.mark.parametrize("where", ["--out", "out:"])
def test_an_unwritable_out_is_refused_before_anything_is_watched(tmp_path, where):
    import argparse

    from servewatch.commands import add_command, serve

    path = tmp_path / "serve.yaml"
    path.write_text("targets: [http://127.0.0.1:1]\n" + ("out: /proc/x\n" if where == "out:" else ""))
    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers(), serve)
    args = parser.parse_args(["serve", "--config", str(path), *(["--out", "/proc/x"] if where == "--out" else [])])
    with pytest.raises(ServewatchError, match=r"^--out /proc/x: not writable \(No such file or directory\)$"):
        config_from_args(args)


def test_file_sd_json_and_yaml(tmp_path):
    json_file = tmp_path / "a.json"
    json_file.write_text('[\n\t{"targets": ["10.0.0.1:8000", "10.0.0.2:8000"], "labels": {"job": "vllm"}},\n'
                         '\t{"targets": ["10.0.0.3:443"], "labels": {"__scheme__": "https"}}\n]\n')
    yaml_file = tmp_path / "b.yaml"
    yaml_file.write_text("- targets: ['10.0.1.1:30000']\n")
    assert [t.url for t in read_file_sd(str(json_file))] == ["http://10.0.0.1:8000", "http://10.0.0.2:8000",
                                                            "https://10.0.0.3:443"]
    assert [t.name for t in read_file_sd(str(yaml_file))] == ["10.0.1.1:30000"]


def test_file_sd_error_names_the_line_of_the_bad_target(tmp_path):
    path = tmp_path / "sd.json"
    path.write_text('[\n  {"targets": [\n    "10.0.0.1:8000",\n    "http://10.0.0.2:8000"\n  ]}\n]\n')
    with pytest.raises(ServewatchError, match=r"sd\.json:4: \[0\]\.targets\[1\]: 'http://10\.0\.0\.2:8000' is not host:port"):
        read_file_sd(str(path))


def test_file_sd_reload_keeps_the_last_good_set_and_counts_the_error(tmp_path):
    path = tmp_path / "sd.json"
    path.write_text('[{"targets": ["10.0.0.1:8000"]}]')
    sd = FileSd((str(tmp_path / "*.json"),))
    assert [t.url for t in sd.load_strict()] == ["http://10.0.0.1:8000"]

    def rewrite(text):
        before = os.stat(path).st_mtime_ns
        path.write_text(text)
        os.utime(path, ns=(before + 10**9, before + 10**9))   # a new mtime even on a coarse clock

    rewrite('[{"targets": ["10.0.0.1:8000",\n "10.0.0.2:8000"], "lables": {}}]')
    result = sd.refresh()
    assert not result.changed and sd.errors == 1
    assert result.errors == [f"{path}:2: [0].lables: unknown key (a group has `targets` and `labels`) "
                             "(keeping its last 1 target(s))"]
    assert [t.url for t in sd.targets()] == ["http://10.0.0.1:8000"]
    assert sd.refresh().errors == []          # said once, not at every look
    rewrite('[{"targets": ["10.0.0.1:8000", "10.0.0.2:8000"]}]')
    assert sd.refresh().changed and len(sd.targets()) == 2
    path.unlink()
    assert sd.refresh().changed and sd.targets() == []


def test_missing_or_bad_file_sd_at_start_is_an_error(tmp_path):
    with pytest.raises(ServewatchError, match="no such file_sd file"):
        FileSd((str(tmp_path / "nope.json"),)).load_strict()
    bad = tmp_path / "bad.json"
    bad.write_text('{"targets": []}')
    with pytest.raises(ServewatchError, match=r"bad\.json:1: document: a file_sd file is a list"):
        FileSd((str(bad),)).load_strict()


def test_duplicates_are_merged_and_said_once():
    specs = [spec_for("http://a:1"), spec_for("http://a:1/metrics"), spec_for("http://b:2", "x"),
             spec_for("http://c:3", "x")]
    kept, said = merge(specs)
    assert [s.url for s in kept] == ["http://a:1", "http://b:2"]
    assert said == ["http://a:1 is listed more than once; watched once",
                    "target name x is used by two URLs; http://c:3 is not watched"]


def test_shards_split_a_fleet_stably_and_completely():
    fleet = [spec_for(f"http://10.0.{i // 250}.{i % 250}:8000") for i in range(600)]
    owners = [[s for s in fleet if Shard(i, 3).owns(s)] for i in range(3)]
    assert sum(map(len, owners)) == 600                              # every target on exactly one shard
    assert all(150 <= len(o) <= 250 for o in owners)                # roughly even
    assert all(Shard(i, 3).owns(s) for i, o in enumerate(owners) for s in o)   # same answer every time
    assert parse_shard("2/3") == Shard(2, 3)
    for bad in ("3/3", "x", "1/0", "-1/2"):
        with pytest.raises(ServewatchError):
            parse_shard(bad)


def test_backoff_grows_and_is_capped():
    assert [backoff_delay(n, 2.0) for n in range(BACKOFF_AFTER)] == [0.0] * BACKOFF_AFTER
    assert backoff_delay(BACKOFF_AFTER, 2.0) == 2.0 and backoff_delay(BACKOFF_AFTER + 2, 2.0) == 8.0
    assert backoff_delay(BACKOFF_AFTER + 40, 2.0) == BACKOFF_CAP_S


def _sample(t, gen, steps, running=4.0, waiting=0.0, kv=0.5, slot_limit=8):
    state = EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=running, waiting=waiting, kv_usage=kv,
                        slot_limit=slot_limit, counters=Counters(generation_tokens=gen, steps=steps))
    return MetricsSample(t=t, dialect="vllm", naming="vllm-0.32", engines=(state,))


def test_signals_from_a_window():
    samples = [_sample(100 + i, gen=10.0 * i, steps=float(i)) for i in range(6)]          # moving until t=105
    samples += [_sample(106 + i, gen=50.0, steps=5.0, waiting=3.0, kv=0.9) for i in range(4)]  # frozen after
    s = signals(Window(metrics=tuple(samples)), now=110.0)
    assert s.seconds_since_progress == 5.0                    # the last movement arrived at t=105
    assert s.tokens_per_s == pytest.approx(50 / 9)          # over the newest 10 s: t=100 (0) to t=109 (50)
    assert s.waiting == 3.0 and s.running_over_slot_limit == 0.5
    assert s.kv_usage_mean == pytest.approx((0.5 * 6 + 0.9 * 4) / 10)
    moving = signals(Window(metrics=tuple(samples[:6])), now=105.0)
    assert moving.tokens_per_s == pytest.approx(10.0) and moving.steps_per_s == pytest.approx(1.0)
    assert moving.seconds_since_progress == 0.0
    assert signals(Window(), now=1.0).seconds_since_progress is None


def _random_scrape(rng, t):
    """A good scrape of one or two engines (KV said or not), or a failed one."""
    if rng.random() < 0.1:
        return MetricsSample(t=t, dialect="vllm", naming="vllm-0.32", error="timeout")
    engines = tuple(EngineState("vllm", "vllm-0.32", {"engine": str(e)}, running=4.0, waiting=rng.choice([0.0, 2.0]),
                                kv_usage=rng.choice([None, rng.random()]), slot_limit=8,
                                counters=Counters(generation_tokens=float(rng.randrange(50)), steps=float(t)))
                    for e in range(rng.choice([1, 1, 2])))
    return MetricsSample(t=t, dialect="vllm", naming="vllm-0.32", engines=engines)


def test_signals_carried_from_window_to_window_are_those_of_the_whole_window():
    """An export's columns carried from its last window give the very signals of reading the window afresh,
    whatever the windows: sliding by a few scrapes (a ring's), by many, skipping ahead, or starting over."""
    import random
    from collections import deque

    rng = random.Random(54)
    for _ in range(40):
        ring = deque(maxlen=rng.randrange(3, 40))
        columns, t = Columns(), 0.0
        for _ in range(60):
            for _ in range(rng.choice([0, 1, 1, 2, 5, 50])):
                t += rng.choice([0.0, 0.5, 2.0])           # equal times too
                ring.append(_random_scrape(rng, t))
            metrics = tuple(ring)
            if rng.random() < 0.1:
                metrics = metrics[rng.randrange(len(metrics) + 1):]   # a slice: since a time
            window = Window(metrics=metrics)
            assert signals(window, t + 1.0, columns) == signals(window, t + 1.0)
        assert columns.metrics == metrics


def test_signals_read_only_the_scrapes_new_since_the_last_window(monkeypatch):
    samples = [_sample(100 + i, gen=10.0 * i, steps=float(i), kv=i / 20) for i in range(20)]
    columns = Columns()
    signals(Window(metrics=tuple(samples[:10])), 110.0, columns)
    read = []
    monkeypatch.setattr(signals_module, "_mean", lambda values: read.append(values) or values[0])
    moved = signals(Window(metrics=tuple(samples[3:13])), 113.0, columns)   # three gone, three new
    assert len(read) == 3
    assert moved.kv_usage_mean == pytest.approx(sum(i / 20 for i in range(3, 13)) / 10)
    signals(Window(metrics=tuple(samples[14:16])), 116.0, columns)           # nothing in common: read afresh
    assert len(read) == 5



def test_readyz_follows_health_and_the_scrape():
    assert probes.readyz([], True, True, None).ok
    assert probes.readyz([], False, True, "http_503").reason == "/health not 2xx (HTTP 503)"
    assert not probes.readyz([], True, False, "parse").ok
    assert probes.readyz([], True, False, "parse").reason == "/metrics scrape failed (not Prometheus text)"
    # a name that stopped resolving during the run is said as such, not as "could not connect" (issue 50)
    assert probes.readyz([], False, True, "dns").reason == "/health not 2xx (host name not resolved)"
    assert probes.readyz([], False, True, "connect").reason == "/health not 2xx (could not connect)"


def test_prometheus_sd_keeps_active_targets_of_the_job_and_labels():
    from servewatch.serve.prometheus_sd import PrometheusSdConfig, targets_from_api

    body = {"status": "success", "data": {"activeTargets": [
        {"scrapeUrl": "http://10.0.0.1:8000/metrics", "labels": {"job": "vllm", "namespace": "inference"}},
        {"scrapeUrl": "http://10.0.0.2:8000/metrics", "labels": {"job": "vllm", "namespace": "test"}},
        {"scrapeUrl": "http://10.0.0.3:9100/metrics", "labels": {"job": "node", "namespace": "inference"}},
        {"scrapeUrl": "unix:///x", "labels": {"job": "vllm", "namespace": "inference"}},
    ]}}
    import json as _json
    config = PrometheusSdConfig("http://prom:9090", job="vllm", labels={"namespace": "inference"})
    assert [t.url for t in targets_from_api(_json.dumps(body), config)] == ["http://10.0.0.1:8000"]
    assert len(targets_from_api(_json.dumps(body), PrometheusSdConfig("http://prom:9090"))) == 3
    with pytest.raises(ServewatchError, match="not a Prometheus /api/v1/targets answer"):
        targets_from_api("<html>", config)


def test_prometheus_sd_config_errors_name_the_line(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text("prometheus_sd:\n  url: http://prom:9090\n  job: vllm\n  refresh: often\n")
    with pytest.raises(ServewatchError, match=r"serve\.yaml:4: prometheus_sd\.refresh: 'often' is not a duration"):
        serve_config.load(str(path))
    path.write_text("prometheus_sd:\n  url: http://prom:9090\n  job: vllm\n  labels: {namespace: inference}\n")
    sd = serve_config.load(str(path)).prometheus_sd
    assert (sd.url, sd.job, sd.labels, sd.refresh_s) == ("http://prom:9090", "vllm", {"namespace": "inference"}, 30.0)


def test_bundle_quota_removes_the_oldest_bundles_of_any_target_and_keeps_the_newest(tmp_path):
    from servewatch.serve.bundle_quota import FleetBundleQuota

    def bundle(target, stamp, size):
        path = tmp_path / target / f"incident-20261130T1200{stamp:02d}Z-engine_dead-0123abcd"
        path.mkdir(parents=True)
        (path / "samples.json").write_bytes(b"x" * size)
        os.utime(path, (1000 + stamp, 1000 + stamp))
        return path

    old_a, old_b, mid_a, new_b = bundle("a", 1, 400), bundle("b", 2, 400), bundle("a", 3, 400), bundle("b", 4, 400)
    (tmp_path / "a" / "notes.txt").write_text("not a bundle")
    quota = FleetBundleQuota(str(tmp_path), cap_bytes=900)
    quota.sink().on_fired(None)
    assert [p.exists() for p in (old_a, old_b, mid_a, new_b)] == [False, False, True, True]
    assert quota.removed == 2 and (tmp_path / "a" / "notes.txt").exists()
    FleetBundleQuota(str(tmp_path), cap_bytes=10).enforce(keep=str(new_b))
    assert new_b.exists() and not mid_a.exists()            # the bundle just written always stays


def test_only_a_target_running_on_this_machine_gets_a_gpu_source():
    """A remote replica's GPUs are not this machine's: sampling NVML once per remote target would report
    the wrong devices (and cost a thread hop per target)."""
    from servewatch.clock import RealClock
    from servewatch.serve.config import FLEET_RECORDING, ServeConfig
    from servewatch.serve.fleet import Fleet
    from servewatch.serve.targets import TargetSpec
    from servewatch.sinks.export.exporter import FleetExporter

    fleet = Fleet(ServeConfig(recording=replace(FLEET_RECORDING, probe=False)), None, RealClock(), FleetExporter(lambda: []),
                  extra_sinks=lambda spec: [])

    def kinds(spec):
        return sorted(source.kind for source in fleet._recorder_for(spec, lambda source: source).sources)

    # slots: every HTTP target's, read only once a scrape names an engine whose dialect has a slot listing
    assert kinds(TargetSpec("remote", "http://10.0.0.7:8000")) == ["health", "metrics", "slots"]
    assert kinds(TargetSpec("local", "http://127.0.0.1:8000", pid=os.getpid())) == ["gpu", "health", "metrics",
                                                                                   "process", "slots"]


def test_serve_runs_on_uvloop_where_installed_else_on_asyncio(monkeypatch):
    """`servewatch serve` (tests/test_serve_cli.py runs it) takes uvloop's event loop; without uvloop, asyncio's
    (the in-process serve tests run on asyncio's)."""
    import sys

    import uvloop

    from servewatch.serve.app import loop_factory

    assert loop_factory() is uvloop.new_event_loop
    monkeypatch.setitem(sys.modules, "uvloop", None)      # `import uvloop` raises ImportError
    assert loop_factory() is None
