"""One URL checker and one exit-status table for every command (issue 50, items 4 and 5).

Every command that takes a server's URL, run (in-process, through the CLI's `main`) with each kind of bad URL:
exactly one line on stderr naming what is wrong, exit status 2 (2), nothing raised. Then the statuses
that differed by command: `verify` and `summarize` on a path that is not there (2) and on a directory of
bundles (a line each, 1 when one fails, naming it), `load` when no request succeeded (1), and the table itself
in errors.py, reference.md and every --help."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from servewatch import errors
from servewatch.cli import build_parser, main

try:  # tests/ imported as a package or as a plain directory
    from tests.sinks_synthetic import synthetic_recompute, synthetic_stall_bundle
except ModuleNotFoundError:
    from sinks_synthetic import synthetic_recompute, synthetic_stall_bundle

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tests" / "fixtures" / "postmortem" / "qwen2.5-7b-instruct-awq.config.json"
DNS = "http://no-such-host.invalid:8000"          # .invalid never resolves (RFC 6761)

# Each kind of bad URL, and the words its one line must hold.
BAD_URLS = {
    "unclosed bracket": ("http://[::1:8000", "an unclosed '['"),
    "no scheme": ("not-a-url", "not an http(s) URL (write http://HOST:PORT)"),
    "ftp scheme": ("ftp://127.0.0.1:8000", "not an http(s) URL: the scheme is ftp"),
    "port 99999": ("http://127.0.0.1:99999", "bad port: a number from 1 to 65535"),
    "a=b=c": ("a=b=c", "not an http(s) URL (write http://HOST:PORT)"),
    "dns": (DNS, "the host name no-such-host.invalid could not be resolved"),
}

# Every command that takes a server's URL ({u}), and ({tmp}) a scratch directory.
COMMANDS = {
    "watch": "watch {u} --duration 1 --no-probe",
    "guard": "guard {u} --pid 1 --no-stacks --duration 1",
    "serve --target": "serve --target {u} --listen 127.0.0.1:0",
    "serve.yaml": "serve --config {tmp}/serve.yaml --listen 127.0.0.1:0",
    "inspect": "inspect {u}",
    "diagnose": "diagnose {u} --window 1",
    "canary record": "canary record {u} --out {tmp}/canary.json",
    "load": "load {u} --requests 1 --model m --tokenizer approx",
    "drill --target": "drill --fault kill --target {u} --pid 1",
    "proxy --upstream": "proxy --listen 127.0.0.1:0 --upstream {u}",
    "advise --against": f"advise --model {CONFIG} --gpu H100 --weights-bytes 15GB --max-model-len 4096 --against {{u}}",
}

# Where a command reads the argument as something else too, its own words (inspect and diagnose also read files).
OWN_WORDS = {
    ("inspect", "no scheme"): "not-a-url: No such file or directory",
    ("inspect", "a=b=c"): "a=b=c: No such file or directory",
    ("diagnose", "no scheme"): "not-a-url: not a URL, a bundle directory or a load directory",
    ("diagnose", "a=b=c"): "a=b=c: not a URL, a bundle directory or a load directory",
    ("serve --target", "a=b=c"): "--target 'a=b=c': not an http(s) URL",     # NAME=URL: name a, URL b=c
    # with --pid the identity check names the host (and --unverified-pid-ok, for a host seen only from elsewhere)
    ("guard", "dns"): "no-such-host.invalid does not resolve here (pass --unverified-pid-ok",
}
# serve watches a fleet: a host name that does not resolve yet is a target that is down (its records say why),
# not a reason to stop watching the others; it is refused on its syntax only.
NOT_REFUSED = {("serve --target", "dns"), ("serve.yaml", "dns")}

CASES = [pytest.param(command, kind, id=f"{command}-{kind}") for command in COMMANDS for kind in BAD_URLS
         if (command, kind) not in NOT_REFUSED]


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """main(argv): (status, stdout, stderr); anything raised (a traceback) fails the test, naming the command.
    `serve` runs in a process of its own: a URL it wrongly accepts would be watched until a timeout ends it."""
    if argv[0] == "serve":
        try:
            done = subprocess.run([sys.executable, "-m", "servewatch", *argv], capture_output=True, text=True,
                                  timeout=30, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{' '.join(argv)}: accepted, still running after 30 s") from None
        return done.returncode, done.stdout, done.stderr
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - a traceback is what the test is for
        raise AssertionError(f"{' '.join(argv)}: raised {type(exc).__name__}: {exc}") from None
    said = capsys.readouterr()
    return code, said.out, said.err


@pytest.mark.parametrize("command, kind", CASES)
def test_every_command_refuses_every_bad_url_in_one_line(command, kind, tmp_path, capsys):
    url, words = BAD_URLS[kind]
    words = OWN_WORDS.get((command, kind), words)
    (tmp_path / "serve.yaml").write_text(f"targets:\n  - url: {json.dumps(url)}\n", encoding="utf-8")
    argv = COMMANDS[command].format(u=url, tmp=tmp_path).split()
    code, _, err = run_cli(argv, capsys)
    lines = err.splitlines()
    assert code == 2, (argv, code, err)
    assert len(lines) == 1 and words in lines[0], (argv, err)
    assert lines[0].startswith(f"servewatch {argv[0]}: ")
    assert "Traceback" not in err and "ValueError" not in err and "None" not in err


def test_the_checker_names_brackets_schemes_ports_and_host_names():
    from servewatch.transport.urls import BadUrl, parse

    assert parse("http://[::1]:8000/metrics").host == "::1"
    assert parse("http://[::1]:8000").base == "http://[::1]:8000"
    assert parse("https://user:pw@vllm.internal").base == "https://vllm.internal"
    assert parse("https://vllm.internal").port == 443
    assert parse("127.0.0.1:8000").base == "http://127.0.0.1:8000"        # a bare HOST:PORT is http
    for bad, words in (("http://[vllm]:8000", "brackets hold an IPv6 address only"),
                       ("http://127.0.0.1:0", "bad port 0"), ("http://127.0.0.1:", "bad port: empty"),
                       ("http://a_b=c:80", "bad host name 'a_b=c'"), ("http://", "no host"),
                       ("http://ex ample:80", "holds a space"), ("localhost", r"not an http\(s\) URL")):
        with pytest.raises(BadUrl, match=words) as caught:
            parse(bad, "--upstream")
        assert str(caught.value).startswith(f"--upstream {bad!r}: ")
        assert isinstance(caught.value, ValueError) and caught.value.exit_code == 2


def test_a_dns_failure_is_named_where_a_connection_failure_is_worded():
    """The transport's words for socket.gaierror (what serve's records and every scrape failure say)."""
    import asyncio

    from servewatch.transport.http1 import ConnectFailed, Endpoint, Http1Client, connect_words

    assert connect_words(socket.gaierror(-2, "Name or service not known"), "vllm.internal") == \
        "the host name vllm.internal could not be resolved"

    async def once():
        client = Http1Client(Endpoint.parse(DNS), connect_timeout=10.0)
        with pytest.raises(ConnectFailed) as caught:
            await client.request("GET", "/health")
        return str(caught.value)

    assert asyncio.run(once()) == "the host name no-such-host.invalid could not be resolved"


# --- verify and summarize: a path that is not there, a directory of bundles -------------------------------------

@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """A directory of two bundles as the writer leaves it (its pins file too)."""
    out = tmp_path_factory.mktemp("out")
    first, second = synthetic_stall_bundle(out), synthetic_stall_bundle(out)
    assert first != second
    (out / ".pinned").write_text(f"{first.name}\n", encoding="utf-8")
    return out


@pytest.fixture
def recompute(monkeypatch):
    from servewatch.bundle import verify

    monkeypatch.setattr(verify, "detectors_recompute", synthetic_recompute)


def test_verify_a_directory_of_bundles_gives_a_line_each(bundles, recompute, tmp_path, capsys):
    names = sorted(p.name for p in bundles.iterdir() if p.is_dir())
    code, out, err = run_cli(["verify", str(bundles)], capsys)
    assert code == 0 and err == ""
    assert [line.split(":")[0] for line in out.splitlines()] == [f"OK {name}" for name in names] + [str(bundles)]
    assert out.splitlines()[-1] == f"{bundles}: 2 of 2 bundle(s) verified"
    broken = tmp_path / "out"
    shutil.copytree(bundles, broken)
    (broken / names[1] / "incident.json").write_bytes((broken / names[1] / "incident.json").read_bytes() + b" ")
    code, out, err = run_cli(["verify", str(broken)], capsys)
    assert code == 1
    assert out.splitlines() == [out.splitlines()[0], f"{broken}: 1 of 2 bundle(s) verified, 1 failed"]
    assert out.startswith(f"OK {names[0]}:")
    assert err.count("\n") == 1 and err.startswith(f"servewatch verify: {broken / names[1]}: incident.json: SHA-256")
    code, out, _ = run_cli(["verify", "--json", str(broken)], capsys)
    assert code == 1
    assert [(row["bundle"], row["ok"]) for row in map(json.loads, out.splitlines())] == \
        [(str(broken / names[0]), True), (str(broken / names[1]), False)]


def test_a_path_that_is_not_there_is_bad_input(bundles, recompute, tmp_path, capsys):
    for command in ("verify", "summarize"):
        code, out, err = run_cli([command, str(tmp_path / "nope")], capsys)
        assert code == 2 and out == ""
        assert err == f"servewatch {command}: {tmp_path / 'nope'}: no such file or directory\n"
    code, out, err = run_cli(["verify", str(tmp_path / "nope"), str(bundles)], capsys)   # the rest still checked
    assert code == 2 and out.count("OK ") == 2 and err.count("\n") == 1


def test_summarize_a_directory_of_bundles(bundles, tmp_path, capsys):
    names = sorted(p.name for p in bundles.iterdir() if p.is_dir())
    code, out, err = run_cli(["summarize", str(bundles)], capsys)
    assert code == 0 and err == ""
    assert [line for line in out.splitlines() if line.startswith("- bundle: ")] == \
        [f"- bundle: `{name}`" for name in names]
    code, out, err = run_cli(["summarize", str(bundles), "--md", str(tmp_path / "md")], capsys)
    assert code == 0 and sorted(p.name for p in (tmp_path / "md").iterdir()) == sorted(f"{n}.md" for n in names)
    broken = tmp_path / "out"
    shutil.copytree(bundles, broken)
    (broken / names[0] / "manifest.json").write_text("{", encoding="utf-8")
    code, out, err = run_cli(["summarize", str(broken)], capsys)
    assert code == 1
    assert out.count("- bundle: ") == 1 and f"- bundle: `{names[1]}`" in out
    first, last = err.splitlines()
    assert first.startswith(f"servewatch summarize: {broken / names[0]}: manifest.json: not valid JSON")
    assert last == f"servewatch summarize: {broken}: 1 of 2 bundle(s) not summarized"


# --- load: no request succeeded ---------------------------------------------------------------------------------

def test_load_with_no_request_that_succeeded_exits_1_saying_so(capsys):
    with socket.socket() as s:                  # a port nothing listens on: every request is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = run_cli(["load", f"http://127.0.0.1:{port}", "--requests", "4", "--model", "m",
                            "--tokenizer", "approx", "--metrics-interval", "0", "--json"], capsys)
    assert code == 1
    assert err.splitlines()[-1] == "servewatch load: none of the 4 request(s) succeeded (4 could not connect)"


# --- the table ---------------------------------------------------------------------------------------------------

def test_the_table_is_in_errors_reference_and_every_help():
    assert (errors.OK, errors.CHECKED_BAD, errors.USAGE, errors.ACTED, errors.HARDWARE) == (0, 1, 2, 3, 6)
    from servewatch.actions import policy

    assert (policy.EXIT_KILLED, policy.EXIT_HARDWARE) == (errors.ACTED, errors.HARDWARE)
    reference = (ROOT / "docs" / "site" / "reference.md").read_text(encoding="utf-8")
    for code, meaning in errors.EXIT_STATUSES:
        assert f"| {code} | {meaning} |" in reference
    epilog = errors.exit_status_epilog()
    assert all(len(line) <= 79 for line in epilog.splitlines())
    parser = build_parser()
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    for name, sub in commands.items():
        text = sub.format_help()
        if name in ("guard", "drill"):        # a table of their own, in the same terms
            assert "exit status" in text and "2 " in text
        else:
            assert text.rstrip("\n").endswith(epilog), name


def test_gpu_check_reads_dcgm_exporters_url_through_the_same_checker(capsys):
    """gpu-check --gpu-metrics: a bad URL said as serve's --gpu-metrics says it, a DNS failure named."""
    code, out, err = run_cli(["gpu-check", "--gpu-metrics", "http://[::1:9400"], capsys)
    assert code == 2 and "Traceback" not in err and "Invalid IPv6" not in out + err
    assert "--gpu-metrics 'http://[::1:9400': not an http(s) URL of dcgm-exporter's page" in out + err
    code, out, err = run_cli(["gpu-check", "--gpu-metrics", "http://no-such-host.invalid:9400"], capsys)
    assert code == 2 and "(the host name no-such-host.invalid could not be resolved)" in out + err


def test_serve_names_a_target_whose_host_name_does_not_resolve_and_watches_the_rest():
    """serve is not refused for it (a fleet's name may appear later), but says it as such, once, at the start."""
    import selectors
    import signal
    import time

    process = subprocess.Popen([sys.executable, "-m", "servewatch", "serve", "--target", DNS, "--target",
                                "http://127.0.0.1:9", "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stderr, selectors.EVENT_READ)
            deadline = time.monotonic() + 30
            while not any("listening on" in line for line in lines) and time.monotonic() < deadline:
                if selector.select(timeout=deadline - time.monotonic()):
                    line = process.stderr.readline()
                    if not line:
                        break
                    lines.append(line.rstrip("\n"))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        process.stderr.close()
    assert lines[0] == (f"servewatch serve: target no-such-host.invalid:8000: '{DNS}': the host name "
                        "no-such-host.invalid could not be resolved; watched all the same, as down until it resolves")
    assert lines[1].startswith("servewatch serve: listening on http://127.0.0.1:") and "watching 2 target(s)" in lines[1]
