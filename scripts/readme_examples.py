"""Regenerate every shown output of the README and of the docs site (docs/site/) from real runs.

A region of README.md or of a page under docs/site/ between `<!-- example: NAME -->` and `<!-- /example -->` is
what the example NAME prints when run now: the commands are run for real (servewatch through its own CLI,
in-process, promtool when installed) in a temporary directory, on the inputs shipped in examples/ and
tests/fixtures/, or on the built-in engine in virtual time. The command pages' usage and flags are rewritten
from the parser as well (scripts/docs_commands.py).

    python scripts/readme_examples.py           rewrite every region and command page
    python scripts/readme_examples.py --check   exit 1 and show a diff where a file differs from a run now

A code block that shows a command and is not such a region says why it is not run, on the line before it:
`<!-- not-run: needs a real vLLM; quoted from the run of 2026-12-05 -->` (tests/test_docs.py checks).
Examples marked not deterministic (their output holds a time measured on the machine) are rewritten by the
first form and only run, not compared, by `--check`.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
README = ROOT / "README.md"
SITE = ROOT / "docs" / "site"
EXAMPLES_DIR = ROOT / "examples"
REGION = re.compile(r"(<!-- example: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /example -->)", re.S)
FENCE = "```"
WIDTH = "100"          # the terminal width every example is printed at (tables wrap to it)
BUNDLE = "examples/bundle-stall"      # a stall bundle made by `make_bundle()`, shipped, verified by the tests


def documents() -> list[Path]:
    """README.md and every page of the site."""
    return [README, *sorted(SITE.rglob("*.md"))]


@contextlib.contextmanager
def _cwd(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@contextlib.contextmanager
def _columns(width: str = WIDTH):
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def _servewatch(*argv: str) -> tuple[int, str, str]:
    """Run `servewatch ARGV` in-process: (exit code, stdout, stderr)."""
    from servewatch.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _columns():
        try:
            code = main(list(argv))
        except SystemExit as exc:           # argparse's own exits
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().splitlines()]


def _shown(workdir: Path, argv: tuple[str, ...], expect: int = 0, comment: str = "",
           keep=lambda lines: lines, stderr_first: bool = False) -> list[str]:
    """`$ servewatch ARGV` and what it printed (stdout, then stderr; `stderr_first` for a command that reports
    on stderr as it goes and prints its tables at the end), run in `workdir`; fails unless it exits `expect`."""
    with _cwd(workdir):
        code, out, err = _servewatch(*argv)
    if code != expect:
        raise SystemExit(f"servewatch {' '.join(argv)}: exit {code}, expected {expect}: {err.strip()[-400:]}")
    import shlex

    command = "$ servewatch " + shlex.join(argv) + (f"    # {comment}" if comment else "")
    return [command, *keep(_lines(err) + _lines(out) if stderr_first else _lines(out) + _lines(err))]


def _block(*lines: str, lang: str = "") -> str:
    return "\n".join([FENCE + lang, *lines, FENCE]) + "\n"


def _examples_in(workdir: Path) -> None:
    """The shipped inputs, where the shown commands find them (`examples/...`, `tests/fixtures/...`)."""
    shutil.copytree(EXAMPLES_DIR, workdir / "examples")
    (workdir / "tests").mkdir()
    shutil.copytree(ROOT / "tests" / "fixtures" / "metrics", workdir / "tests" / "fixtures" / "metrics")
    shutil.copytree(ROOT / "tests" / "fixtures" / "postmortem", workdir / "tests" / "fixtures" / "postmortem")


# --- rules, slo.yaml ---------------------------------------------------------------------------------------

def slo_yaml() -> str:
    """examples/slo.yaml: the file the pages show and the examples run on."""
    return (EXAMPLES_DIR / "slo.yaml").read_text(encoding="utf-8")


def _rules(workdir: Path) -> Path:
    (workdir / "slo.yaml").write_text(slo_yaml(), encoding="utf-8")
    code, _, err = _servewatch("rules", "--slo", str(workdir / "slo.yaml"), "--out", str(workdir / "llm-rules.yml"))
    if code != 0:
        raise SystemExit(f"servewatch rules failed: {err.strip()}")
    return workdir / "llm-rules.yml"


def rule_counts(workdir: Path) -> tuple[int, int]:
    """(alerts, recording rules) in the rule file examples/slo.yaml gives."""
    import yaml

    doc = yaml.safe_load(_rules(workdir).read_text(encoding="utf-8"))
    rules = [r for g in doc["groups"] for r in g["rules"]]
    return sum("alert" in r for r in rules), sum("record" in r for r in rules)


def example_slo_yaml(workdir: Path) -> str:
    return _block(*_lines(slo_yaml()), lang="yaml")


def example_rules_counts(workdir: Path) -> str:
    alerts, records = rule_counts(workdir)
    return f"Two excerpts of `llm-rules.yml` ({alerts} alerts, {records} recording rules):\n"


def example_rules_excerpt(workdir: Path) -> str:
    """Two rules of the file, as written: the TTFT SLI's 5-minute error ratio and the availability page."""
    text = _rules(workdir).read_text(encoding="utf-8")
    items = re.split(r"(?m)^(?=  - (?:record|alert): )", text)
    picked = [item for item in items if item.startswith("  - record: slo:sli_error:ratio_rate5m\n")
              and "sli: ttft" in item][:1]
    picked += [item for item in items if item.startswith("  - alert: ErrorBudgetBurnPage\n")
               and "sli: availability" in item][:1]
    if len(picked) != 2:
        raise SystemExit("llm-rules.yml: the two excerpted rules are not there any more")
    return _block(*_lines("".join(picked)), lang="yaml")


def example_rules_check(workdir: Path) -> str | None:
    """`servewatch rules` then `promtool check rules`, and the one line a wrong threshold gets. None without
    promtool (its region is left as it is: never written without it)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return None
    rules = _rules(workdir)
    checked = subprocess.run([promtool, "check", "rules", rules.name], cwd=workdir, capture_output=True,
                             text=True, check=False)
    bad = slo_yaml().replace("threshold: 1}", "threshold: 1.2}")
    (workdir / "bad.yaml").write_text(bad, encoding="utf-8")
    with _cwd(workdir):
        code, _, err = _servewatch("rules", "--slo", "bad.yaml", "--out", "x.yml")
    assert code == 2, "a threshold off the bucket edges must be refused"
    return _block("$ servewatch rules --slo slo.yaml --out llm-rules.yml && promtool check rules llm-rules.yml",
                  *(checked.stdout + checked.stderr).rstrip().splitlines(),
                  "$ sed 's/threshold: 1}/threshold: 1.2}/' slo.yaml > bad.yaml && "
                  "servewatch rules --slo bad.yaml --out x.yml",
                  err.strip())


def example_dashboard(workdir: Path) -> str:
    """`servewatch dashboard`, and how many panels the file it writes holds."""
    lines = _shown(workdir, ("dashboard", "--dialect", "vllm", "--out", "llm-dashboard.json"))
    doc = json.loads((workdir / "llm-dashboard.json").read_text(encoding="utf-8"))
    panels = doc.get("panels") or doc.get("dashboard", {}).get("panels") or []
    count = sum(1 for panel in panels if panel.get("type") != "row")
    titles = ", ".join(panel.get("title", "") for panel in panels if panel.get("type") != "row")
    return (_block(*lines) + f"\nThe file holds a {count}-panel Grafana dashboard (built with Grafana's foundation "
            f"SDK): {titles}.\n")


# --- requests ------------------------------------------------------------------------------------------------

REQUESTS_ARGV = ("requests", "examples/requests.jsonl", "--by", "outcome", "--goodput", "ttft=2000,tpot=100")


def make_requests(directory: Path) -> Path:
    """examples/requests.jsonl: `servewatch load`'s overload scenario for 15 s against the simulator (RTX 3060
    profile, 16 slots) in virtual time, so the same records every run; the requests still unfinished 10 s after
    the last arrival end as timeouts (the virtual run's drain, `request_timeout_s`)."""
    from servewatch.clock import VirtualClock
    from servewatch.load.output import write_outputs
    from servewatch.load.scenarios import LoadConfig
    from servewatch.load.virtual import run_load_virtual
    from servewatch.sim import SimConfig, SimEngine

    engine = SimEngine(SimConfig(profile="rtx3060-7b", max_num_seqs=16), VirtualClock())
    run = run_load_virtual(LoadConfig(url="sim://in-process", scenario="overload", duration_s=15,
                                      metrics_interval_s=0, request_timeout_s=10), engine)
    with tempfile.TemporaryDirectory() as tmp:
        assert not write_outputs(run, Path(tmp))
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(tmp) / "requests.jsonl", directory / "requests.jsonl")
    return directory / "requests.jsonl"


def example_requests(workdir: Path) -> str:
    _examples_in(workdir)
    return _block(*_shown(workdir, REQUESTS_ARGV))


def example_requests_export(workdir: Path) -> str:
    _examples_in(workdir)
    lines = _shown(workdir, ("requests", "examples/requests.jsonl", "--export", "mooncake", "incident.jsonl"))
    head = (workdir / "incident.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    return _block(*lines, "$ head -2 incident.jsonl", *head)


# --- the demo ------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _demo_output() -> tuple[str, ...]:
    """`servewatch demo --fast` in a fresh directory (virtual time: the same every run): its verdicts as they
    come (stderr), then its tables; the progress bar's line (it holds the seconds it took) left out."""
    with tempfile.TemporaryDirectory(prefix="docs-demo-") as tmp:
        lines = _shown(Path(tmp), ("demo", "--fast"), stderr_first=True)
    return tuple(line for line in lines if not re.search(r"\d+/\d+ phases", line))


def example_demo(workdir: Path) -> str:
    return _block(*_demo_output())


def example_demo_summary(workdir: Path) -> str:
    """The demo's last part: the signature table and what the health checks missed."""
    lines = list(_demo_output())
    start = next(i for i, line in enumerate(lines) if line.startswith("Signatures of four workloads"))
    return _block(lines[0], "…", *lines[start:])


def example_demo_time(workdir: Path) -> str:
    """How long the demo takes here: measured (not deterministic), rewritten with the rest."""
    import datetime
    import time

    with tempfile.TemporaryDirectory(prefix="docs-demo-time-") as tmp:
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "servewatch", "demo", "--fast", "--out", tmp + "/d"],
                              capture_output=True, text=True, check=False)
        took = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"servewatch demo --fast: exit {done.returncode}")
    cores = os.cpu_count()
    return (f"`servewatch demo --fast` took {took:.1f} s here ({datetime.date.today().isoformat()}, "
            f"{cores} cores, load average {os.getloadavg()[0]:.1f}; `scripts/readme_examples.py` measures it).\n")


@contextlib.contextmanager
def _sim_server(workdir: Path, *args: str):
    """A `servewatch sim` on a free port for the length of the block: (the line it printed on stderr, its URL).
    Stopped with SIGTERM after (killed if still up 30 s later)."""
    import selectors
    import signal
    import time

    server = subprocess.Popen([sys.executable, "-m", "servewatch", "sim", "--port", "0", *args],
                              cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        started, deadline = None, time.monotonic() + 60
        with selectors.DefaultSelector() as selector:
            selector.register(server.stderr, selectors.EVENT_READ)
            while started is None and time.monotonic() < deadline and server.poll() is None:
                if selector.select(timeout=max(0.0, deadline - time.monotonic())):
                    line = server.stderr.readline()
                    started = re.search(r"on (http://127\.0\.0\.1:(\d+))", line) and line.rstrip()
        if not started:
            raise SystemExit(f"servewatch sim {' '.join(args)} did not say where it listens within 60 s")
        yield started, re.search(r"http://127\.0\.0\.1:\d+", started)[0]
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def example_sim(workdir: Path) -> str:
    """`servewatch sim` for real: started on a free port (shown as 8123), a stall injected through its fault
    endpoint, /health asked (the requests curl would send, sent with urllib), then stopped with SIGTERM."""
    import urllib.request

    with _sim_server(workdir, "--log-file", "sim.log") as (started, url):
        fault = urllib.request.Request(url + "/_sim/fault", data=b'{"kind":"stall"}', method="POST")
        with urllib.request.urlopen(fault, timeout=10) as answer:
            said = answer.read().decode().strip()
        with urllib.request.urlopen(url + "/health", timeout=10) as answer:
            health = answer.status

    def shown(text: str) -> str:                              # the port a reader types
        return text.replace(url, "http://127.0.0.1:8123")
    return _block("$ servewatch sim --port 8123 --log-file sim.log &", shown(started),
                  "$ curl -s -X POST -d '{\"kind\":\"stall\"}' http://127.0.0.1:8123/_sim/fault", shown(said),
                  "$ curl -s -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:8123/health      # still green",
                  str(health))


def example_canary(workdir: Path) -> str:
    """`canary record` from one simulator, `canary check` against it and against one serving another model
    (free ports, shown as 8000 and 8001)."""
    with _sim_server(workdir, "--model-name", "tiny") as (_, first), \
            _sim_server(workdir, "--model-name", "other-model") as (_, second):
        record = _shown(workdir, ("canary", "record", first, "--out", "canary.json"))
        same = _shown(workdir, ("canary", "check", first, "canary.json"), comment="the same server")
        other = _shown(workdir, ("canary", "check", second, "canary.json"), expect=1, comment="another model")
    lines = [line.replace(first, "http://127.0.0.1:8000").replace(second, "http://127.0.0.1:8001")
             for line in (*record, *same, *other)]
    return _block(*lines)


# --- watch and guard in real time (regenerated, run by --check but not compared: times and figures are measured) --

SHOWN_URL = "http://127.0.0.1:8123"      # the simulator's free port, as a reader types it


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _live(workdir: Path, argv: tuple[str, ...], url: str, steps=(), timeout: float = 120,
          env: dict | None = None, shown: str = SHOWN_URL) -> tuple[int, list[str]]:
    """`servewatch ARGV` in a process of its own, its stdout (not a terminal) and stderr read as one stream in
    the order written, the URL shown as `shown`: (exit status, lines). `steps`: (pattern, act(process)) in
    order, each act called at the first line its pattern matches (a signal to the running command). A command
    still running after `timeout` seconds fails the example."""
    import threading

    process = subprocess.Popen([sys.executable, "-m", "servewatch", *argv], cwd=workdir, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "COLUMNS": WIDTH, "PYTHONUNBUFFERED": "1", **(env or {})})
    lines: list[str] = []
    pending = list(steps)
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    try:
        for line in process.stdout:
            lines.append(line.rstrip().replace(url, shown))
            if pending and re.search(pending[0][0], line):
                pending.pop(0)[1](process)
        code = process.wait()
    finally:
        timer.cancel()
    if code == -9:
        raise SystemExit(f"servewatch {' '.join(argv)}: still running after {timeout:.0f} s:\n" + "\n".join(lines))
    return code, lines


@contextlib.contextmanager
def _load_in_background(workdir: Path, url: str, *args: str):
    """`servewatch load URL ARGS` for the length of the block (the work a stall is seen under), then stopped."""
    import signal

    load = subprocess.Popen([sys.executable, "-m", "servewatch", "load", url, *args], cwd=workdir,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield load
    finally:
        if load.poll() is None:
            load.send_signal(signal.SIGTERM)
        try:
            load.wait(timeout=30)
        except subprocess.TimeoutExpired:
            load.kill()
            load.wait()


def _needs(lines: list[str], pattern: str, what: str) -> None:
    if not any(re.search(pattern, line) for line in lines):
        raise SystemExit(f"{what}: no line matches {pattern!r}; the run printed:\n" + "\n".join(lines[-20:]))


WATCH_ARGV = ("--interval", "0.5", "--out", "bundles", "--json", "--duration", "20")


def example_watch_stall(workdir: Path) -> str:
    """`watch --json --out` on the built-in engine under load (4 long answers), a stall of 6 s injected 8 s after
    the engine's start: the fired line with its bundle's path, the cleared line, the exit status."""
    with _sim_server(workdir, "--fault", "stall@8s:for=6") as (_, url), \
            _load_in_background(workdir, url, "--scenario", "long-output", "--requests", "4"):
        code, lines = _live(workdir, ("watch", url, *WATCH_ARGV), url)
    _needs(lines, r'"event": "fired".*"verdict": "alive_health_ok_no_progress"', "watch-stall")
    _needs(lines, r'"event": "cleared".*"verdict": "alive_health_ok_no_progress"', "watch-stall")
    return _block(f"$ servewatch watch {SHOWN_URL} {' '.join(WATCH_ARGV)}", *lines, "$ echo $?", str(code))


LOG_ARGV = ("--interval", "0.5", "--out", "bundles", "--duration", "20")
EVENT_LINE = re.compile(r"^\d\d:\d\d:\d\d ")     # watch.event_lines' plain line: its time first


def example_watch_log(workdir: Path) -> str:
    """The stall of watch-stall with watch's stdout a file and no --json: one plain line per event in the log
    (the fired line with its bundle's path, the cleared line), written as each happened; the rest on stderr."""
    with _sim_server(workdir, "--fault", "stall@8s:for=6") as (_, url), \
            _load_in_background(workdir, url, "--scenario", "long-output", "--requests", "4"):
        code, lines = _live(workdir, ("watch", url, *LOG_ARGV), url)
    log = [line for line in lines if EVENT_LINE.match(line)]          # stdout: the event lines, in order
    said = [line for line in lines if not EVENT_LINE.match(line)]     # stderr, to the terminal
    _needs(log, r"verdict alive_health_ok_no_progress fired: .* — bundle bundles/incident-\S+$", "watch-log")
    _needs(log, r"verdict alive_health_ok_no_progress cleared after \d+\.\d s$", "watch-log")
    return _block(f"$ servewatch watch {SHOWN_URL} {' '.join(LOG_ARGV)} > log", *said, "$ cat log", *log)


def example_watch_on_demand(workdir: Path) -> str:
    """A bundle of the current window at any time: SIGUSR1 to a running `watch` (once it records), SIGTERM once
    it said the bundle's path, then `verify` of that bundle."""
    import signal

    with _sim_server(workdir) as (_, url):
        code, lines = _live(workdir, ("watch", url, "--interval", "0.5", "--out", "bundles"), url,
                            steps=[(r"recording", lambda p: p.send_signal(signal.SIGUSR1)),
                                   (r"bundle on demand", lambda p: p.send_signal(signal.SIGTERM))])
    asked = next((i for i, line in enumerate(lines) if "recording" in line), None)
    said = next((i for i, line in enumerate(lines) if re.search(r"bundle on demand: \S+", line)), None)
    if asked is None or said is None or said < asked:
        raise SystemExit("watch-on-demand: no 'recording' then 'bundle on demand' line:\n" + "\n".join(lines))
    bundle = re.search(r"bundle on demand: (\S+)", lines[said])[1]
    return _block(f"$ servewatch watch {SHOWN_URL} --interval 0.5 --out bundles &", *lines[:asked + 1],
                  "$ kill -USR1 %1", *lines[asked + 1:said + 1],
                  "$ kill -TERM %1; wait %1; echo $?", *lines[said + 1:], str(code),
                  *_shown(workdir, ("verify", bundle)))


GUARD_SHOWN = ("servewatch guard http://127.0.0.1:8123 --json --stacks-dir stacks -- servewatch sim --port 8123 "
               "--fault stall@8s")


def example_guard_stall(workdir: Path) -> str:
    """`guard --json` starting the built-in engine itself, a stall injected 8 s after its start while `load`
    gives it 4 long answers: guard's own lines (its JSON on stdout, its words on stderr; the server's log, which
    guard passes on to stderr, left out): the policy, the server's identity, the fired line, the stacks, the
    kill and guard's exit status (3: acted)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    script = Path(sys.executable).with_name("servewatch")       # the venv's command, as a reader runs it
    command = (str(script),) if script.exists() else (sys.executable, "-m", "servewatch")
    argv = ("guard", url, "--json", "--stacks-dir", "stacks", "--", *command, "sim", "--port", str(port), "--fault",
            "stall@8s")
    loads: list = []

    def give_work(process):
        loads.append(subprocess.Popen([sys.executable, "-m", "servewatch", "load", url, "--scenario",
                                       "long-output", "--requests", "4"], cwd=workdir,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        code, lines = _live(workdir, argv, url, steps=[(r'"guard": "identity"', give_work)])
    finally:
        for load in loads:
            if load.poll() is None:
                load.terminate()
            load.wait(timeout=30)
    lines = [line.replace(f"port {port}", "port 8123") for line in lines
             if line.startswith(("{", "servewatch guard:"))]
    _needs(lines, r'"guard": "kill"', "guard-stall")
    return _block("$ " + GUARD_SHOWN, *lines, "$ echo $?", str(code))


PROBE_ARGV = ("--interval", "0.5", "--json", "--probe", "--probe-interval", "5s", "--probe-deadline", "5s",
              "--duration", "25")


def example_watch_probe(workdir: Path) -> str:
    """The active probe against the built-in engine wedged while idle (2 s after its start, for 12 s): /health
    green, no counter moving, and a one-token probe with no token; cleared when the engine answers again."""
    with _sim_server(workdir, "--fault", "wedge-idle@2s:for=12") as (_, url):
        code, lines = _live(workdir, ("watch", url, *PROBE_ARGV), url)
    _needs(lines, r'"event": "fired".*"verdict": "not_serving"', "watch-probe")
    _needs(lines, r'"event": "cleared".*"verdict": "not_serving"', "watch-probe")
    return _block(f"$ servewatch watch {SHOWN_URL} {' '.join(PROBE_ARGV)}", *lines)


PROXY_SHOWN = {"listen": "127.0.0.1:18432", "upstream": "http://127.0.0.1:18431", "metrics": "127.0.0.1:18433"}


def example_proxy_stall(workdir: Path) -> str:
    """`servewatch proxy --watch` in front of the built-in engine, one streamed request through it, then a stall
    injected under that stream: the request path's verdict (`requests_no_token`) beside the counters' one."""
    import threading
    import urllib.request

    listen, metrics = f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"
    argv = ("proxy", "--listen", "LISTEN", "--upstream", "UPSTREAM", "--metrics-listen", "METRICS", "--records",
            "requests.jsonl", "--watch", "--interval", "0.5", "--duration", "15")
    with _sim_server(workdir, "--model-name", "m") as (_, upstream):
        def stream_then_stall():
            body = json.dumps({"model": "m", "prompt": "hello", "max_tokens": 4000, "stream": True}).encode()
            request = urllib.request.Request(f"http://{listen}/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    answer.readline()                       # the stream has begun: stall the engine under it
                    stall = urllib.request.Request(upstream + "/_sim/fault", data=b'{"kind":"stall"}', method="POST")
                    urllib.request.urlopen(stall, timeout=10).read()
                    while answer.readline():
                        pass
            except OSError:
                pass                                        # the proxy stopped at --duration, mid-stream
        given = {"LISTEN": listen, "UPSTREAM": upstream, "METRICS": metrics}
        code, lines = _live(workdir, tuple(given.get(a, a) for a in argv), upstream,
                            steps=[(r"listening on", lambda p: threading.Thread(target=stream_then_stall,
                                                                                daemon=True).start())],
                            shown=PROXY_SHOWN["upstream"])
    lines = [line.replace(listen, PROXY_SHOWN["listen"]).replace(metrics, PROXY_SHOWN["metrics"]) for line in lines]
    _needs(lines, r'"event": "fired".*"verdict": "requests_no_token"', "proxy-stall")
    shown = {"LISTEN": PROXY_SHOWN["listen"], "UPSTREAM": PROXY_SHOWN["upstream"], "METRICS": PROXY_SHOWN["metrics"]}
    return _block("$ servewatch " + " ".join(shown.get(a, a) for a in argv), *lines)


CRASHING = 'python3 -c "import sys,time; time.sleep(.5); sys.exit(7)"'


def example_guard_crash_loop(workdir: Path) -> str:
    """Three guard runs around a server that exits 7 after half a second: the third names the crash loop (guard's
    ledger of earlier runs kept under the example's own $XDG_STATE_HOME)."""
    state = {"XDG_STATE_HOME": str(workdir / "state")}
    argv = ("guard", "http://127.0.0.1:9", "--out", "out", "--", "python3", "-c",
            "import sys,time; time.sleep(.5); sys.exit(7)")
    runs = [_live(workdir, argv, "http://127.0.0.1:9", env=state, shown="http://127.0.0.1:9") for _ in range(3)]
    _needs(runs[-1][1], r"crash_loop", "guard-crash-loop")
    return _block(f"$ for i in 1 2 3; do servewatch guard http://127.0.0.1:9 --out out -- {CRASHING}; done",
                  "...    # the first two runs, then the third:", *runs[-1][1], "$ echo $?    # of the third",
                  str(runs[-1][0]))


# --- bundles: verify, summarize, diagnose ----------------------------------------------------------------------

def make_bundle(directory: Path) -> Path:
    """The shipped stall bundle: the demo's health-green stall, recorded every 2 s (a small bundle), copied to
    `directory`. Run by hand (`python scripts/readme_examples.py --make-inputs`), never by --check."""
    with tempfile.TemporaryDirectory(prefix="docs-bundle-") as tmp:
        with _cwd(Path(tmp)):
            code, _, err = _servewatch("demo", "--fast", "--interval", "2", "--out", "d")
        if code != 0:
            raise SystemExit(f"demo failed: {err[-400:]}")
        found = sorted(Path(tmp, "d", "bundles").glob("incident-*-alive_health_ok_no_progress-*"))
        if directory.exists():
            shutil.rmtree(directory)
        shutil.copytree(found[0], directory)
    return directory


def example_verify(workdir: Path) -> str:
    _examples_in(workdir)
    ok = _shown(workdir, ("verify", BUNDLE))
    tampered = workdir / "tampered"
    shutil.copytree(workdir / BUNDLE, tampered)
    samples = tampered / "samples-000.json"
    data = bytearray(samples.read_bytes())
    data[len(data) // 2] ^= 0x01
    samples.write_bytes(bytes(data))
    bad = _shown(workdir, ("verify", "tampered"), expect=1, comment="one flipped bit; exit 1")
    as_json = _shown(workdir, ("verify", "--json", BUNDLE))
    return _block(*ok, *bad, *as_json)


def example_summarize(workdir: Path) -> str:
    _examples_in(workdir)
    lines = _shown(workdir, ("summarize", BUNDLE, "--md", "stall.md", "--html", "stall.html"))
    md = (workdir / "stall.md").read_text(encoding="utf-8").splitlines()
    return _block(*lines, "$ head -20 stall.md") + _block(*md[:20], lang="markdown")


def example_diagnose_bundle(workdir: Path) -> str:
    _examples_in(workdir)
    with _cwd(workdir):
        code, _, _ = _servewatch("diagnose", BUNDLE)
    return _block(*_shown(workdir, ("diagnose", BUNDLE), expect=code))


# --- inspect, postmortem, advise, drill ------------------------------------------------------------------------

def example_inspect(workdir: Path) -> str:
    _examples_in(workdir)
    return _block(*_shown(workdir, ("inspect", "tests/fixtures/metrics/vllm_kv_pressure_t0.prom")))


def example_postmortem(workdir: Path) -> str:
    _examples_in(workdir)
    argv = ("postmortem", "tests/fixtures/postmortem/vllm_overload_oom_reconstructed.log", "--vocab-size", "152064")
    with _cwd(workdir):
        code, _, _ = _servewatch(*argv)
    return _block(*_shown(workdir, argv, expect=code))


def example_advise(workdir: Path) -> str:
    _examples_in(workdir)
    return _block(*_shown(workdir, ("advise", "--model", "examples/llama-3-8b/", "--gpu", "H100",
                                    "--weights-bytes", "14.96GiB", "--slo-itl", "50ms")))


def example_drill_sim(workdir: Path) -> str:
    return _block(*_shown(workdir, ("drill", "--plan", "standard", "--engine", "sim", "--dry-run")))


# --- the reference, from the registry, its runbooks, the schemas and the exporter -----------------------------

def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def example_verdicts(workdir: Path) -> str:
    """Every verdict of the registry with its runbook branch (each declared in its verdict module)."""
    from servewatch.detectors import registry

    out = ["| verdict | kind | severity | action class | what it means |", "|---|---|---|---|---|"]
    for spec in registry.specs():
        out.append(f"| [`{spec.name}`](#{spec.name}) | {spec.kind} | {spec.severity} | "
                   f"{', '.join(spec.actions) + ' (per firing)' if spec.actions else spec.action} | "
                   f"{_cell(spec.summary)} |")
    for spec in registry.specs():
        book = spec.runbook
        cls = f"action class {spec.action}" if not spec.actions else f"action class {spec.action_by}"
        acts = spec.evidence_words() if not spec.actions else ""     # its class's words say it all
        out += ["", f"### {spec.name}", "", f"*{spec.kind}, severity {spec.severity}, {cls}"
                f"{'; acts once: ' + acts if acts else ''}; evidence from "
                f"{', '.join(spec.evidence_sources)}.*", "", " ".join(book.meaning.split()), "",
                "**Check next**", ""]
        out += [f"- {' '.join(step.split())}" for step in book.check_next]
        out += ["", f"**Expected range.** {' '.join(book.expected_range.split())}", "",
                f"**Safe action.** {' '.join(book.safe_action.split())}", "",
                f"**Rollback.** {' '.join(book.rollback.split())}", "",
                f"**What a restart destroys.** {' '.join(book.restart_destroys.split())}"]
        if book.by_cause:
            out += ["", "**By cause**", ""]
            out += [f"- `{cause}`: {' '.join(words.split())}" for cause, words in book.by_cause.items()]
    return "\n".join(out) + "\n"


def example_exit_statuses(workdir: Path) -> str:
    """The exit statuses every command shares (servewatch/errors.py's EXIT_STATUSES, the table every --help ends
    with) and guard's own (servewatch/actions/policy.py's table)."""
    from servewatch.actions import policy
    from servewatch.errors import EXIT_STATUSES

    out = ["| status | every command |", "|---|---|", *(f"| {code} | {meaning} |" for code, meaning in EXIT_STATUSES),
           "", "`servewatch guard`'s own, as `servewatch/actions/policy.py` declares them (what a restart policy "
           "should see; bad input is 2 as for every command):", "", "| status | guard |", "|---|---|"]
    doc = policy.__doc__.split("Exit status", 1)[1].splitlines()[1:]
    rows: list[list[str]] = []
    for line in doc:
        match = re.match(r"\s{2}(\S+(?: \S+)*?)\s{2,}(.*)", line)
        if match and not line.startswith("    "):
            code, words = match[1], match[2]
            constant = re.match(r"(EXIT_\w+)\s+(.*)", words)
            if constant:
                code, words = f"{code} (`{constant[1]}`)", constant[2]
            rows.append([code, words])
        elif rows and line.strip():
            rows[-1][1] += " " + line.strip()
    out += [f"| {code} | {_cell(words)} |" for code, words in rows]
    return "\n".join(out) + "\n"


def example_bundle_schema(workdir: Path) -> str:
    """The bundle's files and their fields, from the closed JSON Schemas (servewatch/bundle/schema/)."""
    out = []
    for path in sorted((ROOT / "servewatch" / "bundle" / "schema").glob("*.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        required = set(schema.get("required", ()))
        out += [f"### {schema.get('title', path.name)}", "", f"`servewatch/bundle/schema/{path.name}`"
                + (f": {_cell(schema['description'])}" if schema.get("description") else ""), "",
                "| field | type | required |", "|---|---|---|"]
        nested = []
        for name, field in schema.get("properties", {}).items():
            out.append(f"| `{name}` | {_type(field)} | {'yes' if name in required else 'no'} |")
            inner = field.get("items", field)
            if "$ref" in inner:
                inner = schema.get("$defs", {}).get(inner["$ref"].rsplit("/", 1)[1], {})
            if inner.get("properties") and name != "samples":
                need = set(inner.get("required", ()))
                nested.append(f"- `{name}`{'[]' if 'items' in field else ''}: " + ", ".join(
                    f"`{key}`" + ("" if key in need else " (optional)") for key in inner["properties"]))
        if nested:
            out += ["", *nested]
        samples = schema.get("properties", {}).get("samples", {}).get("items", {})
        for branch in samples.get("allOf", ()):
            then = branch.get("then", {})
            source = then.get("properties", {}).get("source", {}).get("const")
            if source:
                need = set(then.get("required", ()))
                fields = ", ".join(f"`{n}`" + ("" if n in need else " (optional)")
                                   for n in then.get("properties", {}) if n != "source")
                out.append(f"\nA `{source}` sample: {fields}.")
        out.append("")
    return "\n".join(out)


def _type(field: dict) -> str:
    if "const" in field:
        return f"`{field['const']}`"
    if "enum" in field:
        return "one of " + ", ".join(f"`{v}`" for v in field["enum"])
    kind = field.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    return kind or ("object" if "properties" in field else "see the schema")


def example_metrics(workdir: Path) -> str:
    """The metrics `servewatch serve` exports, as its exporter writes them: a fleet of one target with a value
    in every series (HELP, TYPE and the label names from the exposition itself)."""
    from types import SimpleNamespace

    from servewatch.sinks.export.exporter import DERIVED, FleetExporter

    signals = SimpleNamespace(**{name: 0.0 for name in DERIVED})
    exporter = FleetExporter(derived=lambda: [("t", signals)])
    exporter.add_target("t")
    exporter.scrape_failures.labels("t", "connect").inc(0)
    exporter.sink_failures.labels("webhook").inc(0)
    exporter.targets.labels("up").set(1)
    exporter.gpu_fault_fired("t", {"gpu_uuid": "GPU-0", "xid": 79, "action": "reboot"})
    text = exporter.exposition().decode()
    helps, types, labels = {}, {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, words = line[7:].split(" ", 1)
            helps[name] = words
        elif line.startswith("# TYPE "):
            name, kind = line[7:].split(" ", 1)
            types[name] = kind
        elif (match := re.match(r"(\w+)\{(.*?)\}", line)):
            base = next((n for n in (match[1], re.sub(r"_(total|bucket|count|sum)$", "", match[1])) if n in helps),
                        match[1])
            labels.setdefault(base, set()).update(k for k in re.findall(r"(\w+)=", match[2]) if k != "le")
    out = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for name in sorted(helps):
        shown = name + "_total" if types[name] == "counter" and not name.endswith("_total") else name
        out.append(f"| `{shown}` | {types[name]} | {', '.join(sorted(labels.get(name, ()))) or '–'} | "
                   f"{_cell(helps[name])} |")
    return "\n".join(out) + "\n"


def example_action_policy(workdir: Path) -> str:
    """The action policy as the registry declares it: each verdict's class, the evidence it waits for, and what
    acts on it by default (guard, serve's livez and readyz, the Alertmanager route `servewatch rules` prints)."""
    from servewatch.actions.policy import default_act_on
    from servewatch.derive.rules import ACTION_ROUTES
    from servewatch.detectors import registry
    from servewatch.detectors.verdict import ACTION_CLASSES, DRAIN, RESTART

    routes = {action: receiver for action, receiver, _ in ACTION_ROUTES}
    lines = ["| verdict | action class | evidence before anything acts | guard (default) | livez | readyz | "
             "alert route |", "|---|---|---|---|---|---|---|"]
    for spec in registry.specs():
        evidence = spec.evidence_words() or "the verdict (its own threshold)"
        if spec.actions:           # each firing's own class (gpu_fault: per fault)
            acting = [a for a in spec.actions if a in (RESTART, DRAIN)]
            lines.append(f"| `{spec.name}` | {', '.join(spec.actions)} (per firing) | {evidence} | "
                         f"{'kills the tree (' + ', '.join(acting) + ')' if spec.name in default_act_on() else '–'} | "
                         f"{'503 (restart)' if RESTART in spec.actions else '–'} | "
                         f"503 ({', '.join(acting)}) | "
                         f"{', '.join(f'`{routes[a]}`' for a in spec.actions)} |")
            continue
        lines.append(f"| `{spec.name}` | {spec.action} | {evidence} | "
                     f"{'kills the tree' if spec.name in default_act_on() else '–'} | "
                     f"{'503' if spec.action == RESTART else '–'} | "
                     f"{'503' if spec.action in (RESTART, DRAIN) else '–'} | `{routes[spec.action]}` |")
    classes = "; ".join(f"**{name}**: {words}" for name, words in ACTION_CLASSES.items())
    return "\n".join(lines) + "\n\n" + f"The classes: {classes}.\n"


BAD_INPUT = (   # (shown command, argv, files to write first): each must end at once with one line and exit 2
    ("servewatch serve --config serve.yaml", ("serve", "--config", "serve.yaml"),
     {"serve.yaml": "targets:\n  - url: not-a-url\n"}),
    ("servewatch serve --out /proc/x --target http://127.0.0.1:9", ("serve", "--out", "/proc/x", "--target",
                                                                   "http://127.0.0.1:9"), {}),
    ("servewatch guard http://127.0.0.1:9 --stacks-dir /proc/x -- sleep 60",
     ("guard", "http://127.0.0.1:9", "--stacks-dir", "/proc/x", "--", "sleep", "60"), {}),
    ("servewatch inspect examples/slo.yaml", ("inspect", "examples/slo.yaml"), {}),
    ("servewatch watch http://[::1:8000", ("watch", "http://[::1:8000"), {}),
    ("servewatch load http://no-such-host.invalid:8000", ("load", "http://no-such-host.invalid:8000"), {}),
    ("servewatch verify examples/llama-3-8b", ("verify", "examples/llama-3-8b"), {}),
)


def example_command_names(workdir: Path) -> str:
    """The README's list of the commands, from the parser."""
    import docs_commands

    names = [f"[`{name}`](docs/site/commands/{name}.md)" for name in docs_commands.one_liners()]
    return "- [Commands](docs/site/commands/index.md), one page each, its flags generated from the parser: " + \
        ", ".join(names) + ".\n"


def example_bad_input(workdir: Path) -> str:
    """Bad input that needs no server: each command run as a user would (a process of its own, so that one that
    wrongly started serving is stopped by the timeout, not left running), its exit status and its one line."""
    _examples_in(workdir)
    rows = ["| input | exit | the line on stderr |", "|---|---|---|"]
    for shown, argv, files in BAD_INPUT:
        for name, text in files.items():
            (workdir / name).write_text(text, encoding="utf-8")
        try:
            done = subprocess.run([sys.executable, "-m", "servewatch", *argv], cwd=workdir, capture_output=True,
                                  text=True, timeout=60, check=False, env={**os.environ, "COLUMNS": WIDTH})
        except subprocess.TimeoutExpired:
            raise SystemExit(f"{shown}: still running after 60 s; bad input must end at once") from None
        said = [line for line in done.stderr.splitlines() if line.strip()]
        if done.returncode == 0 or len(said) != 1 or "Traceback" in done.stderr:
            raise SystemExit(f"{shown}: exit {done.returncode}, stderr {done.stderr[-400:]!r}: not one line and a "
                             "non-zero exit")
        rows.append(f"| `{shown}` | {done.returncode} | `{said[0]}` |")
    return "\n".join(rows) + "\n"


def example_benchmark_results(workdir: Path) -> str:
    """The figures CI holds the code to (benchmarks/results.json: each with its runs, its band and the date and
    machine they were measured on)."""
    doc = json.loads((ROOT / "benchmarks" / "results.json").read_text(encoding="utf-8"))
    machine = doc.get("machine", {})
    # the file keeps the figures of every benchmark; the last invocation wrote only its own, so each row says its runs
    out = [f"Measured on {doc.get('date')} on {machine.get('cpus')} cores ({machine.get('cpu')}), Python "
           f"{machine.get('python')}, each figure over the runs in its row (last written by `{doc.get('command')}`, "
           f"{doc.get('runs')} runs):", "",
           "| figure | value | runs | band | better | what |", "|---|---|---|---|---|---|"]
    for name, figure in doc.get("figures", {}).items():
        runs = ", ".join(f"{run:g}" for run in figure.get("runs", ()))
        band = (f"±{figure.get('band', 0):g} {figure.get('unit', '')}" if figure.get("absolute")   # in its unit
                else f"±{figure.get('band', 0):.0%}")
        out.append(f"| `{name}` | {figure['value']:g} {figure.get('unit', '')} | {runs} | "
                   f"{band} | {figure.get('better', '')} | {_cell(figure.get('what', ''))} |")
    return "\n".join(out) + "\n"


def example_command_list(workdir: Path) -> str:
    """Every command of the parser with its one line of help, linked to its page."""
    import docs_commands

    rows = [f"| [`servewatch {name}`]({name}.md) | {_cell(words)} |" for name, words in docs_commands.one_liners().items()]
    return "\n".join(["| command | what it does |", "|---|---|", *rows]) + "\n"


# name -> (render(workdir) -> text, or None when it cannot run here; deterministic)
EXAMPLES = {
    "slo-yaml": (example_slo_yaml, True),
    "rules-counts": (example_rules_counts, True),
    "rules-check": (example_rules_check, True),
    "rules-excerpt": (example_rules_excerpt, True),
    "dashboard": (example_dashboard, True),
    "requests": (example_requests, True),
    "requests-export": (example_requests_export, True),
    "action-policy": (example_action_policy, True),
    "demo": (example_demo, True),
    "demo-summary": (example_demo_summary, True),
    "demo-time": (example_demo_time, False),
    "verify": (example_verify, True),
    "summarize": (example_summarize, True),
    "diagnose-bundle": (example_diagnose_bundle, True),
    "inspect": (example_inspect, True),
    "sim": (example_sim, True),
    "canary": (example_canary, True),
    "watch-stall": (example_watch_stall, False),
    "watch-on-demand": (example_watch_on_demand, False),
    "watch-log": (example_watch_log, False),
    "guard-stall": (example_guard_stall, False),
    "guard-crash-loop": (example_guard_crash_loop, False),
    "watch-probe": (example_watch_probe, False),
    "proxy-stall": (example_proxy_stall, False),
    "postmortem": (example_postmortem, True),
    "advise": (example_advise, True),
    "drill-sim": (example_drill_sim, True),
    "command-list": (example_command_list, True),
    "bad-input": (example_bad_input, True),
    "command-names": (example_command_names, True),
    "benchmark-results": (example_benchmark_results, True),
    "verdicts": (example_verdicts, True),
    "exit-statuses": (example_exit_statuses, True),
    "bundle-schema": (example_bundle_schema, True),
    "metrics": (example_metrics, True),
}


def regions(text: str) -> dict[str, str]:
    return {m["name"]: m["body"] for m in REGION.finditer(text)}


def render(names=None) -> dict[str, str | None]:
    out = {}
    for name, (make, _) in EXAMPLES.items():
        if names is not None and name not in names:
            continue
        with tempfile.TemporaryDirectory(prefix=f"docs-{name}-") as tmp:
            out[name] = make(Path(tmp))
    return out


def rewrite(text: str, rendered: dict[str, str | None]) -> str:
    def put(m: re.Match) -> str:
        new = rendered.get(m["name"])
        return m.group(0) if new is None else m.group(1) + new + m.group(4)
    return REGION.sub(put, text)


def main(argv: list[str]) -> int:
    import docs_commands

    if {"-h", "--help"} & set(argv):    # say how, never regenerate
        print(__doc__.strip())
        return 0
    if "--make-inputs" in argv:        # the shipped inputs themselves (by hand, once: they are inputs, not outputs)
        make_bundle(ROOT / BUNDLE)
        make_requests(EXAMPLES_DIR)
        return 0
    check = "--check" in argv
    texts = {path: path.read_text(encoding="utf-8") for path in documents()}
    used = {name for text in texts.values() for name in regions(text)}
    unknown = used - set(EXAMPLES)
    if unknown:
        print(f"unknown example(s): {', '.join(sorted(unknown))} (not in scripts/readme_examples.py)", file=sys.stderr)
        return 2
    rendered = render(used)
    if check:                          # a measured example is run, not compared
        rendered = {name: text for name, text in rendered.items() if EXAMPLES[name][1]}
    differ = 0
    for path, text in texts.items():
        new = rewrite(text, rendered)
        if new == text:
            continue
        if check:
            differ += 1
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), str(path.relative_to(ROOT)),
                                                       f"{path.relative_to(ROOT)} (regenerated)"))
        else:
            path.write_text(new, encoding="utf-8")
    commands = docs_commands.main(["--check"] if check else [])
    return 1 if differ or commands else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
