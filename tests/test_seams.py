"""The seams hold: a new engine, a new verdict and a new sink plug in without touching servewatch/.

- A third dialect needs 2 files: its module (tests/toy_dialect.py) and its registration (one
  `dialects.register(...)` call, here in the `toy_engine` fixture). `inspect` reads it, `watch` records it
  against a tiny fake server, and its bundle passes `verify`; `postmortem` reads its log (stats, startup,
  settings, its traceback frames and its death) and `advise` prints its bucket flags.
- A new verdict needs 1 registry entry with its detector (the `busy_verdict` fixture): it appears in
  `watch --json`, in a bundle that validates against the schema, in verify's recomputation and in
  summarize's runbook section.
- `watch --json` against `servewatch sim` prints a `fired` line for a stall and a `cleared` line after the
  `clear` fault.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from servewatch import dialects
from servewatch.cli import main
from servewatch.detectors import registry
from servewatch.detectors.verdict import FINDING, Evidence, RunbookBranch, Verdict, VerdictSpec
from servewatch.bundle.verify import verify_bundle
from tests.test_watch_command import WATCH, free_port, send_long_requests, wait_healthy
from tests.toy_dialect import ToyDialect

FREEZE_AFTER_SCRAPES = 10


class ToyServer:
    """/health 200 and a toy /metrics whose token counter moves with 3 requests busy, then freezes."""

    def __init__(self):
        self.scrapes = 0
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/health":
                    body = b""
                elif self.path == "/metrics":
                    body = owner.metrics().encode()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def metrics(self) -> str:
        with self.lock:
            self.scrapes += 1
            moved = min(self.scrapes, FREEZE_AFTER_SCRAPES)
        return ("# TYPE toy_busy_requests gauge\ntoy_busy_requests{replica=\"a\"} 3\n"
                "# TYPE toy_queued_requests gauge\ntoy_queued_requests{replica=\"a\"} 0\n"
                f"# TYPE toy_tokens_out counter\ntoy_tokens_out_total{{replica=\"a\"}} {moved * 40}\n"
                f"# TYPE toy_steps counter\ntoy_steps_total{{replica=\"a\"}} {moved * 10}\n")

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def toy_engine():
    dialects.register(ToyDialect())        # the registration: the dialect's second file
    server = ToyServer()
    yield server
    server.close()
    dialects.unregister("toy")


def detect_busy(window, config):
    """Fires while the newest scrape shows 3 or more requests running."""
    good = [m for m in window.metrics if m.error is None and m.engines]
    if not good or (good[-1].engines[0].running or 0) < 3:
        return []
    onset = next(m for m in good if (m.engines[0].running or 0) >= 3)
    last = good[-1]
    return [Verdict("busy_replica", last.t, onset.t, f"{last.engines[0].running:g} requests running",
                    (Evidence("metrics", last.t, "running", last.engines[0].running),), {})]


BUSY_RUNBOOK = RunbookBranch(
    meaning="A test verdict: the replica has three or more requests in flight.",
    check_next=("The running gauge over the window.", "The arrival rate."),
    expected_range="Fewer than three running on this toy replica.",
    safe_action="Nothing: the toy replica is only busy.",
    rollback="Nothing to roll back.",
    restart_destroys="The toy replica's three requests.")


@pytest.fixture
def busy_verdict():
    registry.register(VerdictSpec("busy_replica", detect_busy, FINDING, "info", "three or more requests running",
                                  BUSY_RUNBOOK, ("metrics",)))
    yield
    registry.unregister("busy_replica")


def test_a_third_dialect_is_read_by_inspect(toy_engine, tmp_path, capsys):
    scrape = tmp_path / "toy.prom"
    scrape.write_text(toy_engine.metrics())
    assert main(["inspect", str(scrape), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dialect"] == "toy" and report["generation"] == "toy-1"
    engine, = report["engines"]
    assert engine["running"] == 3 and engine["counters"]["generation_tokens"] == 40


def test_a_third_dialect_and_a_new_verdict_go_through_watch_bundles_verify_and_summarize(
        toy_engine, busy_verdict, tmp_path, capsys):
    out = tmp_path / "bundles"
    code = main(["watch", toy_engine.url, "--interval", "0.2", "--json", "--out", str(out), "--stop-on-incident",
                 "--duration", "30", "--set", "stall.floor_s=1"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 1                                   # stopped on the stall, an incident
    by_name = {line["verdict"]: line for line in lines if line["event"] == "fired"}
    assert set(by_name) == {"busy_replica", "alive_health_ok_no_progress"}
    assert "3 requests running" in by_name["busy_replica"]["why"]

    stall_bundle = by_name["alive_health_ok_no_progress"]["bundle"]
    checked = verify_bundle(stall_bundle)            # hashes, schema (with busy_replica in its enum), recomputation
    assert checked.verdicts_checked == 2
    incident = json.loads((tmp_path / stall_bundle / "incident.json").read_text())
    assert incident["target"]["dialect"] == "toy" and incident["detector_config"]["stall_floor_s"] == 1
    assert verify_bundle(by_name["busy_replica"]["bundle"]).verdicts_checked >= 1

    md = tmp_path / "stall.md"
    assert main(["summarize", stall_bundle, "--md", str(md)]) == 0
    text = md.read_text()
    assert "busy_replica" in text and BUSY_RUNBOOK.meaning in text and BUSY_RUNBOOK.safe_action in text


TOY_LOG = """\
toy| 2026-01-01 00:00:00 [api] toy args: slots=8 model=/srv/models/secret
toy| 2026-01-01 00:00:02 [core] toy weights loaded in 1.5 s
toy| 2026-01-01 00:00:03 [api] toy engine ready
toy| 2026-01-01 00:00:13 [core] toy stats: busy=3 queued=0
toy| 2026-01-01 00:00:23 [core] toy stats: busy=8 queued=5
toy| 2026-01-01 00:00:25 [core] Traceback (most recent call last):
toy| 2026-01-01 00:00:25 [core]   File "/home/ops/venv/site-packages/toyengine/core.py", line 41, in step
toy| 2026-01-01 00:00:25 [core]   File "/home/ops/venv/site-packages/toyengine/slots.py", line 9, in reserve
toy| 2026-01-01 00:00:25 [core] toyengine.SlotsExhaustedError: no slot for request req-7f3e
toy| 2026-01-01 00:00:26 [api] toy core died
"""


def test_a_third_dialects_log_is_read_by_postmortem(toy_engine, tmp_path, capsys):
    log = tmp_path / "toy.log"
    log.write_text(TOY_LOG)
    assert main(["postmortem", str(log), "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)
    assert report["dialect"] == "toy" and report["stats_line_generations"] == ["toy-1"]
    assert [(p["stamp"], p["running"], p["waiting"]) for p in report["timeline"]] == [
        ("2026-01-01 00:00:13", 3, 0), ("2026-01-01 00:00:23", 8, 5)]
    stages = {s["stage"]: s for s in report["startup"]["stages"]}
    assert stages["weights"]["seconds"] == 1.5 and report["startup"]["ready_after_s"] == 3.0
    assert report["startup"]["settings"] == {"slots": 8}
    death = report["death"]
    assert death["classification"] == "engine_death_behind_live_api" and "toy core died" in death["summary"]
    assert (death["process"], death["exception"], death["innermost_engine_frame"]) == (
        "core", "toyengine.SlotsExhaustedError", "toyengine.slots.reserve")
    for secret in ("/srv/models", "/home/ops", "req-7f3e"):
        assert secret not in out


def test_a_third_dialects_bucket_flags_are_printed_by_advise(toy_engine, tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
        "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "tie_word_embeddings": False}))
    assert main(["advise", "--model", str(model), "--gpu", "H100", "--dialect", "toy", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["flags"]) == ["toy"]
    args = report["flags"]["toy"]["args"]
    assert [a for a in args if a.startswith("--")] == ["--toy-ttft-buckets", "--toy-itl-buckets", "--toy-e2e-buckets"]
    itl = args[args.index("--toy-itl-buckets") + 1:args.index("--toy-e2e-buckets")]
    assert [float(edge) for edge in itl] == report["buckets"]["itl"]["edges"]


def test_a_bundle_naming_an_unregistered_verdict_fails_verify(toy_engine, tmp_path, capsys):
    registry.register(VerdictSpec("busy_replica", detect_busy, FINDING, "info", "busy", BUSY_RUNBOOK, ("metrics",)))
    try:
        main(["watch", toy_engine.url, "--interval", "0.2", "--json", "--out", str(tmp_path), "--duration", "1.2"])
    finally:
        registry.unregister("busy_replica")
    bundle = next(json.loads(line)["bundle"] for line in capsys.readouterr().out.splitlines())
    from servewatch.errors import BundleInvalid
    with pytest.raises(BundleInvalid, match="schema violation"):
        verify_bundle(bundle)


def test_watch_json_prints_fired_for_a_stall_and_cleared_after_the_clear_fault():
    port = free_port()
    sim = subprocess.Popen([sys.executable, "-m", "servewatch", "sim", "--port", str(port), "--max-num-seqs", "8",
                            "--model-name", "tiny"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    watch = None
    try:
        wait_healthy(url)
        # No step below waits on the wall clock: each waits for the event it needs (a line, a running
        # request), and the deadlines only stop a hung run (a busy 2-core machine took 80 s here).
        watch = subprocess.Popen([*WATCH, url, "--interval", "0.3", "--json", "--duration", "900"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(("out", line)) for line in watch.stdout], daemon=True).start()
        threading.Thread(target=lambda: [lines.put(("err", line)) for line in watch.stderr], daemon=True).start()

        def next_line(stream, predicate, timeout):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    kind, line = lines.get(timeout=deadline - time.monotonic())
                except queue.Empty:
                    break
                if kind == stream and predicate(line):
                    return line
            raise AssertionError(f"no matching {stream} line within {timeout} s")

        next_line("err", lambda line: "recording" in line, HUNG_S)
        streams_under_way(url)          # a stall needs admitted work: the fault waits until the engine holds it
        fault(url, "stall")
        fired = json.loads(next_line("out", lambda line: '"fired"' in line and "no_progress" in line, HUNG_S))
        fault(url, "clear")
        cleared = json.loads(next_line("out", lambda line: '"cleared"' in line and "no_progress" in line, HUNG_S))
        assert fired["event"] == "fired" and cleared["event"] == "cleared"
        assert cleared["onset"] == fired["onset"] and cleared["duration_s"] >= fired["since_s"]
        moved = [e for e in cleared["ended_by"] if e["source"] == "metrics"]
        assert moved and all(e["t"] > fired["t"] for e in moved)
    finally:
        for proc in (watch, sim):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


HUNG_S = 600      # the deadline of a step that never came: a hung run, not a slow machine


def streams_under_way(url, n=4) -> None:
    """Start n long streamed completions and return once each has received its first token: the engine
    holds them (an event each, not a sleep). They read on in their threads until the server ends them."""
    started = [threading.Event() for _ in range(n)]

    def one(event):
        body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 1500, "ignore_eos": True,
                           "stream": True}).encode()
        request = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=HUNG_S) as response:
                for line in response:
                    if line.startswith(b"data: {"):
                        event.set()
        except OSError:
            pass
        finally:
            event.set()      # a failed request must not hang the test: the stall assertion will say so

    for event in started:
        threading.Thread(target=one, args=(event,), daemon=True).start()
    for event in started:
        assert event.wait(HUNG_S), f"no first token within {HUNG_S} s"


def fault(url, kind):
    request = urllib.request.Request(url + "/_sim/fault", json.dumps({"kind": kind}).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


BUILTIN_VERDICTS = ("alive_health_ok_no_progress", "engine_dead", "process_exit", "health_loss", "not_serving",
                    "rank_stalled", "collective_hang", "overload", "kv_pressure", "preemption", "histogram_blind", "target_restarted",
                    "server_errors", "client_errors", "requests_aborted", "startup_stalled", "crash_loop",
                    "requests_no_token", "gpu_fault", "gpu_throttled", "kv_transfer_stall", "kv_expired", "pd_bypass",
                    "kv_transfer_failures")


def test_the_shipped_schemas_list_exactly_the_registered_builtin_verdicts():
    from servewatch.bundle import schemas

    assert registry.names() == BUILTIN_VERDICTS
    for name in ("incident", "samples"):
        for enum in schemas.verdict_name_enums(schemas._shipped(name)):
            assert [v for v in enum if v != "on_demand"] == list(registry.names()), name


def test_every_verdict_has_a_complete_runbook_and_a_valid_spec():
    for spec in registry.specs():
        assert len(spec.runbook.check_next) >= 2 and spec.summary
        # gpu_fault's labels are servewatch_gpu_fault's: bounded by the node's GPUs and the Xid table
        assert set(spec.labels) <= {"engine", "cause", "rule", "histogram", "by", "stage", "gpu_uuid", "xid", "action"}
    with pytest.raises(ValueError, match="severity 'urgent'"):
        VerdictSpec("x_y", detect_busy, FINDING, "urgent", "s", BUSY_RUNBOOK, ("metrics",))
    with pytest.raises(ValueError, match="unknown evidence sources"):
        VerdictSpec("x_y", detect_busy, FINDING, "info", "s", BUSY_RUNBOOK, ("tea_leaves",))


def test_the_shipped_schemas_list_exactly_the_builtin_dialects_identity_labels():
    from servewatch.bundle import schemas

    assert [d.name for d in dialects.registered()] == ["vllm", "sglang", "llamacpp"]     # llama.cpp's series: no labels
    labels = list(dict.fromkeys(label for d in dialects.registered() for label in d.identity_labels))
    for name in ("incident", "samples"):
        objects = schemas.engine_label_objects(schemas._shipped(name))
        assert objects and all(list(o["properties"]) == labels for o in objects), name


@pytest.mark.parametrize("args, message", [
    (["--set", "stall.min_s=abc"], "--set (stall.min_s): stall_floor_s takes a number, not 'abc'"),
    (["--set", "stal.floor_s=5"], "--set: unknown detector setting 'stal.floor_s'"),
    (["--set", "floor"], "--set 'floor': expected KEY=VALUE"),
])
def test_a_bad_detector_setting_is_one_line_naming_the_key(args, message, capsys):
    assert main(["watch", "http://127.0.0.1:1", "--json", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_detector_settings_from_a_toml_file_and_the_command_line(tmp_path):
    from servewatch.detectors import settings

    path = tmp_path / "detectors.toml"
    path.write_text("[stall]\nfloor_s = 5\nk = 3\n[kv]\nhigh = 0.95\n")
    config = settings.build(["stall.floor_s=7"], str(path))
    assert (config.stall_floor_s, config.stall_k, config.kv_high) == (7.0, 3.0, 0.95)
    path.write_text("[kv]\nhigh = [\n")
    from servewatch.errors import ServewatchError
    with pytest.raises(ServewatchError, match="not valid TOML"):
        settings.build([], str(path))
