"""serve's live sinks come from a registry of factories: a kind registered under a name is at once a config
key, a command-line flag and the `sink` label of the give-up counter, and `serve` builds its clients by
name; a new kind needs no line anywhere else. Every fired and cleared verdict reaches every sink through
one interface, the on-loop ones after the others, seeing the bundle they wrote."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from servewatch.commands.serve import config_from_args
from servewatch.detectors.verdict import Verdict
from servewatch.errors import ServewatchError
from servewatch.serve import config as serve_config
from servewatch.sinks.delivery import registry
from servewatch.sinks.base import CallbackSink, Cleared, Fired, Sink
from servewatch.sinks.export.exporter import FleetExporter
from servewatch.watch.recorder import Recorder
from servewatch.watch.targets import callable_sources


def parse(*argv: str):
    from servewatch.commands import add_command, serve

    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers(), serve)
    return parser.parse_args(["serve", *argv])


class ToyClient:
    def __init__(self, url: str, context: registry.SinkContext):
        self.url, self.context = url, context
        self.heard: list[tuple[str, str, str]] = []
        self.closed = False

    def sink(self, target: str) -> Sink:
        return CallbackSink(lambda fired: self.heard.append(("fired", target, fired.verdict.name)),
                            lambda cleared: self.heard.append(("cleared", target, cleared.verdict.name)))

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def toy_kind(monkeypatch):
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))     # the registration ends with the test
    registry.register_sink("toy_pager", ToyClient, help="page the toy pager at this URL")
    return "toy_pager"


def test_the_built_in_kinds_are_config_keys_and_flags(tmp_path):
    assert registry.sink_names()[:2] == ("alertmanager", "webhook")
    path = tmp_path / "serve.yaml"
    path.write_text("alertmanager: http://am:9093\nwebhook: http://hooks/a\ntargets: [http://10.0.0.8:8000]\n")
    assert serve_config.load(str(path)).sinks == {"alertmanager": "http://am:9093", "webhook": "http://hooks/a"}
    cfg = config_from_args(parse("--config", str(path), "--webhook", "http://hooks/b"))
    assert cfg.sinks == {"alertmanager": "http://am:9093", "webhook": "http://hooks/b"}     # the flag over the file
    with pytest.raises(ServewatchError, match="'ftp://x': not an http"):
        config_from_args(parse("--target", "http://10.0.0.8:8000", "--alertmanager", "ftp://x"))


def test_a_registered_kind_is_a_key_a_flag_and_built_by_name(tmp_path, toy_kind):
    path = tmp_path / "serve.yaml"
    path.write_text("toy_pager: http://pager:1\ntargets: [http://10.0.0.8:8000]\n")
    assert serve_config.load(str(path)).sinks == {"toy_pager": "http://pager:1"}
    cfg = config_from_args(parse("--target", "http://10.0.0.8:8000", "--toy-pager", "http://pager:2"))
    assert cfg.sinks == {"toy_pager": "http://pager:2"}

    exporter = FleetExporter()
    clients = registry.build_clients(cfg.sinks, lambda name: registry.SinkContext(
        "serve", exporter.sink_failures.labels(name).inc))
    assert [type(c) for c in clients] == [ToyClient] and clients[0].url == "http://pager:2"
    clients[0].context.on_give_up()
    assert exporter.sink_failures.labels("toy_pager")._value.get() == 1
    verdict = Verdict("engine_dead", 20.0, 18.0, "why")
    for sink in registry.sinks_for(clients, "llama-a"):
        sink.on_fired(Fired(verdict))
        sink.on_cleared(Cleared(verdict, 25.0))
    assert clients[0].heard == [("fired", "llama-a", "engine_dead"), ("cleared", "llama-a", "engine_dead")]
    assert registry.build_clients({}, lambda name: None) == []         # not configured: not built


def test_a_key_not_registered_is_refused_naming_the_registered_ones(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text("pager: http://pager:1\n")
    with pytest.raises(ServewatchError, match=r":1: pager: unknown key \(known: .*alertmanager, webhook, shard"):
        serve_config.load(str(path))


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="registered twice"):
        registry.register_sink("webhook", ToyClient, help="again")


def test_fired_and_cleared_reach_every_sink_by_one_path_the_on_loop_ones_last():
    heard: list[tuple] = []

    def writer(fired):
        heard.append(("writer", fired.verdict.name, fired.bundle, fired.window is not None, len(fired.verdicts)))
        return "bundle-1"

    def after(fired):
        heard.append(("after", fired.bundle))

    def printer(fired):
        heard.append(("printer", fired.bundle, fired.window is not None))

    down = {"now": True}

    def health():
        if down["now"]:
            raise ConnectionRefusedError("down")        # health_loss fires after a few failed probes
        return 200

    from servewatch.clock import VirtualClock

    clock = VirtualClock()
    sources = callable_sources(clock, 1.0, health=health, metrics=lambda: "# no engine here\n")
    sinks = [CallbackSink(printer, lambda c: heard.append(("printer cleared", c.verdict.name)), on_loop=True),
             CallbackSink(writer, lambda c: heard.append(("writer cleared", c.verdict.name))),
             CallbackSink(after)]
    recorder = Recorder(sources, clock, sinks=sinks)

    start = clock.now()

    def advance(t):
        down["now"] = t - start < 30.0

    asyncio.run(recorder.run_virtual(60.0, advance))
    fired = [entry for entry in heard if not entry[0].endswith("cleared")]
    assert fired == [("writer", "health_loss", None, True, 1), ("after", "bundle-1"), ("printer", "bundle-1", True)]
    assert [entry for entry in heard if entry[0].endswith("cleared")] == [("writer cleared", "health_loss"),
                                                                          ("printer cleared", "health_loss")]
    assert recorder.fired == [Fired(recorder.fired[0].verdict, "bundle-1")]
    assert recorder.fired[0].window is None          # the kept record does not hold the window alive
