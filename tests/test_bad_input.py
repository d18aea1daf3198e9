"""Bad input, command by command: one line on stderr saying what was wrong and where, a non-zero exit, no
traceback, no Python words (None, an exception's class name), and nothing that existed before changed.

Each row: the command line ({missing}, {dir}, {empty}, {garbage}, {trunc_json}, {trunc_yaml}, {bundle}, {good},
{new} and {closed} are filled in below), the exit status, and what the last stderr line must contain."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
LOG = FIXTURES / "postmortem" / "vllm_overload_oom_reconstructed.log"
CONFIG = FIXTURES / "postmortem" / "qwen2.5-7b-instruct-awq.config.json"      # no intermediate_size: --weights-bytes
ADVISE = f"advise --model {CONFIG} --gpu H100 --weights-bytes 15GB --max-model-len 4096"
CLOSED = "http://127.0.0.1:{closed}"
PROXY = "proxy --listen 127.0.0.1:0 --upstream http://127.0.0.1:{closed}"
GUARD = "guard http://127.0.0.1:{closed} --no-stacks --duration 2"


def cli(*args, timeout=20):
    """As tests/test_serve_cli.py's `cli`, for any command."""
    return subprocess.run([sys.executable, "-m", "servewatch", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def row(argv: str, code: int, expect: str, lines: int = 2):
    return pytest.param(argv, code, expect, lines, id=f"{argv.replace(str(FIXTURES), '')[:70]}")


CASES = [
    # inspect: a scrape from a file or a URL
    row("inspect {missing}", 2, "{missing}: No such file or directory"),
    row("inspect {dir}", 2, "{dir}: Is a directory"),
    row("inspect {empty}", 2, "not a Prometheus exposition"),
    row("inspect {garbage}", 2, "not UTF-8 text"),
    row("inspect http://", 2, "not an http(s) URL"),
    row(f"inspect {CLOSED}", 2, "connection refused"),
    row("inspect {empty} --timeout -1", 2, "--timeout -1"),
    row("inspect {empty} --max-series 0", 2, "--max-series"),
    # sim: refused before it listens
    row("sim --port 70000", 2, "--port 70000"),
    row("sim --port 0 --log-stats-interval nan", 2, "log-stats-interval"),
    row("sim --port 0 --startup-seconds -1", 2, "startup-seconds"),
    row("sim --port 0 --exit-delay inf", 2, "exit-delay"),
    row("sim --dialect nope", 2, "--dialect"),
    row("sim --port 0 --log-file {dir}", 2, "--log-file {dir}"),
    # load
    row("load htp://x --requests 1", 2, "not an http(s) URL"),
    row("load localhost:notaport --requests 1", 2, "bad port"),
    row(f"load {CLOSED} --requests 1", 2, "/v1/models (connection refused)"),
    row(f"load {CLOSED} --requests 1 --model m --tokenizer approx --timeout nan", 2, "--timeout"),
    row(f"load {CLOSED} --requests 1 --model m --tokenizer approx --metrics-interval nan", 2, "--metrics-interval"),
    row(f"load {CLOSED} --requests 1 --model m --tokenizer approx --prompt-tokens 5:nan", 2, "--prompt-tokens"),
    row(f"load {CLOSED} --requests 1 --model m --tokenizer {{garbage}}", 2, "not a readable tokenizer.json"),
    row(f"load {CLOSED} --rate -1 --requests 1", 2, "--rate"),
    row(f"load {CLOSED} --scenario nope", 2, "--scenario"),
    # watch: a dead URL is watched for --duration, then said
    row("watch htp://x --duration 1", 2, "not an http(s) URL"),
    row(f"watch {CLOSED} --duration 1 --no-probe", 2, "nothing answered /health or /metrics in 1 s"),
    row(f"watch {CLOSED} --interval 0", 2, "--interval"),
    row(f"watch {CLOSED} --duration nan", 2, "--duration"),
    row(f"watch {CLOSED} --detectors {{garbage}}", 2, "--detectors {garbage}: not UTF-8 text"),
    row(f"watch {CLOSED} --detectors {{trunc_yaml}}", 2, "not valid TOML"),
    row(f"watch {CLOSED} --set stall.floor_s=nan", 2, "--set"),
    row(f"watch {CLOSED} --pid 0", 2, "--pid 0"),
    # guard: refused before it starts anything
    row(f"{GUARD}", 2, "give either -- COMMAND"),
    row(f"{GUARD} --lives {{garbage}} -- sleep 100", 2, "--lives {garbage}: not a guard ledger"),
    row(f"{GUARD} --lives {{trunc_json}} -- sleep 100", 2, "--lives {trunc_json}: not a guard ledger"),
    row(f"{GUARD} --act-on nope --pid 1", 2, "--act-on"),
    row(f"{GUARD} --server-nice 70 -- sleep 100", 2, "--server-nice 70"),
    row(f"{GUARD} --exit-grace -1 --pid 1", 2, "--exit-grace"),
    row(f"{GUARD} --detectors {{garbage}} -- sleep 100", 2, "not UTF-8 text"),
    # serve
    row("serve --config {missing}", 2, "{missing}: cannot be read"),
    row("serve --config {trunc_yaml}", 2, "not valid YAML"),
    row("serve --file-sd {dir}", 2, "{dir}: cannot be read"),
    row(f"serve --target {CLOSED} --listen 127.0.0.1:70000", 2, "--listen"),
    row(f"serve --target {CLOSED} --listen 127.0.0.1:0 --bundle-cap nan", 2, "--bundle-cap nan"),
    row("serve --target htp://x", 2, "not an http(s) URL"),
    # verify, summarize: a bad bundle is named
    row("verify {missing}", 2, "{missing}: no such file or directory"),
    row("summarize {missing}", 2, "{missing}: no such file or directory"),
    row("verify {dir}", 1, "{dir}: manifest.json missing"),
    row("verify {bundle}", 1, "{bundle}: manifest.json: not valid JSON"),
    row("summarize {bundle}", 1, "{bundle}: manifest.json: not valid JSON"),
    row("summarize {garbage}", 1, "{garbage}: not a bundle directory"),
    # postmortem
    row("postmortem {empty}", 2, "empty file"),
    row("postmortem {garbage}", 2, "binary data"),
    row("postmortem {dir}", 2, "a directory, not a log file"),
    row(f"postmortem {LOG} --model-config {{garbage}}", 2, "--model-config {garbage}: not JSON"),
    row(f"postmortem {LOG} --vocab-size -1", 2, "--vocab-size -1"),
    # diagnose
    row("diagnose {missing}", 2, "not a URL, a bundle directory or a load directory"),
    row("diagnose {bundle}", 2, "{bundle}: not a readable bundle"),
    row(f"diagnose {CLOSED} --window 1", 2, "could not connect (connection refused) for 1 s; nothing is listening there",
        3),
    row(f"diagnose {CLOSED} --window nan", 2, "--window nan"),
    # advise
    row("advise --model {missing} --gpu H100", 2, "{missing}: no such file"),
    row("advise --model {trunc_json} --gpu H100", 2, "not valid JSON"),
    row(f"{ADVISE} --max-model-len -5", 2, "--max-model-len must be at least 1"),
    row(f"{ADVISE} --slo-itl 0", 2, "--slo-itl"),
    row(f"{ADVISE} --gpu-memory-utilization nan", 2, "--gpu-memory-utilization"),
    row(f"{ADVISE} --against {CLOSED}", 2, "connection refused"),
    row(f"{ADVISE} --against htp://x", 2, "--against 'htp://x'"),
    row(f"{ADVISE} --log {{dir}}", 2, "--log {dir}"),
    # rules, dashboard: a failed run leaves --out as it was
    row("rules --slo {garbage} --out {good}", 2, "--slo {garbage}: not UTF-8 text"),
    row("rules --slo {trunc_yaml} --out {good}", 2, "not valid YAML"),
    row("rules --slo {missing}", 2, "{missing}: cannot be read"),
    row("dashboard --slot-limit 0 --out {good}", 2, "--slot-limit"),
    row("dashboard --out {dir}", 2, "--out: cannot write {dir}"),
    # demo and lab: their flags only
    row("demo --fast --interval nan --out {new}", 2, "--interval"),
    row("demo --fast --interval 0 --out {new}", 2, "--interval"),
    row("demo --dialect nope --out {new}", 2, "--dialect"),
    row("lab vllm --port abc", 2, "--port"),
    row("lab vllm --pd --kv-lease 0", 2, "--kv-lease: 0 is not a number of seconds of at least 1"),
    row("lab vllm --pd --connector mooncake", 2, "--connector"),
    row("lab nope", 2, "invalid choice"),
    # canary
    row(f"canary record {CLOSED} --out {{new}}", 2, "connection refused"),
    row(f"canary record {CLOSED} --out {{missing}}/c.json", 2, "no such directory"),
    row(f"canary check {CLOSED} {{garbage}}", 2, "{garbage}: not a canary file (not UTF-8 text)"),
    row(f"canary check {CLOSED} {{trunc_json}}", 2, "not a canary file"),
    # drill: the plan is read and refused before anything runs
    row("drill {empty} --dry-run", 2, "expected a mapping"),
    row("drill {garbage} --dry-run", 2, "not UTF-8 text"),
    row("drill {trunc_yaml} --dry-run", 2, "not valid YAML"),
    row("drill {missing} --dry-run", 2, "plan {missing}: cannot be read"),
    row(f"drill --fault nope --target {CLOSED} --pid 1 --dry-run", 2, "unknown fault kind"),
    # proxy
    row(f"proxy --listen 127.0.0.1:70000 --upstream {CLOSED}", 2, "--listen"),
    row("proxy --listen 127.0.0.1:0 --upstream htp://x", 2, "not an http(s) URL"),
    row(f"{PROXY} --duration nan", 2, "--duration"),
    row(f"{PROXY} --duration 1 --max-request-mb nan", 2, "--max-request-mb"),
    row(f"{PROXY} --duration 1 --read-timeout nan", 2, "--read-timeout"),
    row(f"{PROXY} --duration 1 --otlp-endpoint htp://x", 2, "--otlp-endpoint"),
    row(f"{PROXY} --duration 1 --records {{dir}}", 2, "--records {dir}"),
    row(f"proxy --listen 127.0.0.1:0 --prefill {CLOSED}", 2, "--prefill URL and --decode URL"),
    row(f"proxy --listen 127.0.0.1:0 --prefill {CLOSED} --decode htp://x", 2, "--decode 'htp://x'"),
    row(f"{PROXY} --prefill {CLOSED} --decode {CLOSED}", 2, "give one or the other"),
    row(f"proxy --listen 127.0.0.1:0 --prefill {CLOSED} --decode {CLOSED} --prefill-timeout 0", 2, "--prefill-timeout"),
    # the root
    row("nope", 2, "invalid choice"),
]

PYTHON_WORDS = re.compile(r"\bNone\b|\b[A-Z]\w*(?:Error|Exception)\b")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def places(tmp_path):
    """The bad inputs, and a good output a failed run must not touch."""
    (tmp_path / "dir").mkdir()
    files = {
        "empty": b"",
        "garbage": b"\xff\xfe\x00\x81" + bytes(range(256)) * 4,
        "trunc_json": b'{"a": [1, 2',
        "trunc_yaml": b'targets:\n  - url: "http://x\n  foo: [1,',
        "good": b"a good output of an earlier run\n",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_bytes(files["trunc_json"])
    paths = {name: str(tmp_path / name) for name in (*files, "dir", "missing", "new", "bundle")}
    return paths, {tmp_path / name: data for name, data in files.items()}


@pytest.mark.parametrize("argv, code, expect, lines", CASES)
def test_bad_input_is_one_line_and_loses_nothing(places, argv, code, expect, lines):
    paths, before = places
    fill = {**paths, "closed": closed_port()}
    result = cli(*[word.format(**fill) for word in argv.split()])
    err = result.stderr
    said = [line for line in err.splitlines() if line.strip()]
    assert result.returncode == code, err
    assert "Traceback" not in err
    assert said and expect.format(**fill) in said[-1], err
    assert said[-1].startswith("servewatch"), err
    assert len(said) <= lines, err
    assert not PYTHON_WORDS.search(err), err
    for path, data in before.items():
        assert path.read_bytes() == data, f"{path.name} changed"
    assert not Path(paths["new"]).exists(), "a failed run left --out behind"
