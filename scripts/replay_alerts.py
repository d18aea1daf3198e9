#!/usr/bin/env python3
"""Would your alerts have fired? A recorded incident's telemetry against a real Prometheus and Alertmanager.

    python scripts/replay_alerts.py BUNDLE --slo slo.yaml [--speed X] [--start S] [--hold S] [--json]

Runs, all on 127.0.0.1 and all stopped at the end:
- `servewatch sim --replay BUNDLE`: the bundle's /health and /metrics over time, its last state held after it ends;
- at --speed 1, `servewatch serve` watching the replay (its verdict series, for the rules' Servewatch* alerts; at
  another speed it is left out: its thresholds are real seconds, and it is said);
- Prometheus (Debian package `prometheus`) with the rules `servewatch rules --slo SLO` writes for the bundle's
  engine, every `for:` and range window divided by --speed so the rules keep their meaning in bundle time;
- Alertmanager (Debian package `prometheus-alertmanager`) routing every alert to a webhook this script listens on.

Then prints, in bundle seconds from the incident's onset (the bundle's trigger verdict), when each alert went
pending, fired in Prometheus and reached Alertmanager's receiver, beside the verdict servewatch recorded.
Exit status 0; 2 with one line on bad input or a missing program.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

READY_S = 30.0
MAX_BODY = 8 * 2**20
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000, "y": 31_536_000_000}


class Refused(Exception):
    """Bad input or a missing program: one line, exit 2."""


def duration_ms(text: str) -> int:
    return sum(int(n) * _UNIT_MS[u] for n, u in _DURATION.findall(text))


def scaled(text: str, speed: float) -> str:
    """A Prometheus duration ("2m", "1h30m") divided by speed, in milliseconds (at least 1 ms)."""
    return f"{max(1, round(duration_ms(text) / speed))}ms"


def scale_rules(text: str, speed: float) -> str:
    """Every `for:` and every range / subquery window of a rule file divided by speed."""
    if speed == 1:
        return text
    whole = r"(?:\d+(?:ms|s|m|h|d|w|y))+"
    text = re.sub(rf"(\bfor:\s*)({whole})", lambda m: m.group(1) + scaled(m.group(2), speed), text)
    return re.sub(rf"\[({whole})(?::({whole}))?\]",
                  lambda m: "[" + scaled(m.group(1), speed) + (f":{scaled(m.group(2), speed)}" if m.group(2) else "")
                  + "]", text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read(MAX_BODY)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(MAX_BODY)
    except OSError:
        return 0, b""


def until(what: str, seconds: float, check) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise Refused(f"{what}: not within {seconds:g} s")


def program(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise Refused(f"{names[0]} is not installed (Debian package {'prometheus-alertmanager' if 'alert' in names[0] else 'prometheus'})")


class Receiver(http.server.ThreadingHTTPServer):
    """Alertmanager's webhook receiver: the wall time each alert name first arrived, firing."""

    def __init__(self):
        self.first: dict[str, float] = {}
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Hook)


class _Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
        try:
            payload = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            payload = {}
        now = time.time()
        with self.server.lock:
            for alert in payload.get("alerts", []):
                if alert.get("status") == "firing":
                    self.server.first.setdefault(alert.get("labels", {}).get("alertname", "?"), now)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def rfc3339(text: str) -> float:
    text = re.sub(r"(\.\d{6})\d+", r"\1", text.replace("Z", "+00:00"))
    return datetime.fromisoformat(text).timestamp()


def clock_words(seconds: float) -> str:
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.1f} s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{sign}{int(minutes)} m {rest:.0f} s"
    hours, minutes = divmod(minutes, 60)
    return f"{sign}{int(hours)} h {int(minutes)} m"


def run(args) -> dict:
    from servewatch.sim.replay import ReplayError, load

    try:
        telemetry = load(args.bundle)
    except ReplayError as exc:
        raise Refused(f"{args.bundle}: {exc}") from None
    if not telemetry.verdicts:
        raise Refused(f"{args.bundle}: the bundle holds no verdict to measure the alerts against")
    if not (args.speed > 0):
        raise Refused(f"--speed {args.speed:g}: must be a positive number")
    trigger = telemetry.incident["trigger"]
    onset = float(trigger["onset"])
    recorded = next((v for v in telemetry.verdicts if v["name"] == trigger["verdict"]), telemetry.verdicts[0])
    start = args.start if args.start is not None else max(0.0, onset - args.lead - telemetry.start)
    prometheus, alertmanager = program("prometheus"), program("prometheus-alertmanager", "alertmanager")
    python = sys.executable
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    work = Path(tempfile.mkdtemp(prefix="servewatch-replay-alerts-"))
    procs: list[subprocess.Popen] = []
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        rules = subprocess.run([python, "-m", "servewatch", "rules", "--slo", str(args.slo), "--dialect",
                                telemetry.dialect, *(["--names", telemetry.naming] if telemetry.naming else []),
                                *([] if args.speed == 1 else ["--no-serve"])],
                               capture_output=True, text=True, timeout=60, env=env)
        if rules.returncode != 0:
            raise Refused(f"servewatch rules: {rules.stderr.strip().splitlines()[-1] if rules.stderr else 'failed'}")
        import yaml

        written = yaml.safe_load(rules.stdout)
        fors = {r["alert"]: r.get("for", "0s") for g in written["groups"] for r in g["rules"] if "alert" in r}
        severity = {r["alert"]: r.get("labels", {}).get("severity", "") for g in written["groups"]
                    for r in g["rules"] if "alert" in r}
        (work / "rules.yml").write_text(scale_rules(rules.stdout, args.speed))
        selector = {}
        slo = yaml.safe_load(Path(args.slo).read_text())
        if isinstance(slo, dict) and isinstance(slo.get("selector"), dict):
            selector = slo["selector"]
        job = str(selector.get("job", "llm"))

        replay_url = f"http://127.0.0.1:{free_port()}"
        serve_port = free_port() if args.speed == 1 else None
        am_port = free_port()
        (work / "alertmanager.yml").write_text(yaml.safe_dump({
            "route": {"receiver": "record", "group_by": ["alertname"], "group_wait": "0s", "group_interval": "1s",
                      "repeat_interval": "1h"},
            "receivers": [{"name": "record", "webhook_configs": [
                {"url": f"http://127.0.0.1:{receiver.server_address[1]}/", "send_resolved": False}]}]}))
        procs.append(subprocess.Popen([alertmanager, f"--config.file={work / 'alertmanager.yml'}",
                                       f"--storage.path={work / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
                                       "--cluster.listen-address=", "--log.level=warn"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        scrape_ms = max(250, min(1000, round(1000 * telemetry.cadence / args.speed)))
        prom_port = free_port()
        targets = [{"job_name": job, "static_configs": [{"targets": [replay_url.split("//", 1)[1]]}]}]
        if serve_port is not None:
            targets.append({"job_name": "servewatch", "static_configs": [{"targets": [f"127.0.0.1:{serve_port}"]}]})
        (work / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": f"{scrape_ms}ms", "evaluation_interval": f"{scrape_ms}ms",
                       "scrape_timeout": f"{scrape_ms}ms"},
            "rule_files": [str(work / "rules.yml")],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
            "scrape_configs": targets}))
        procs.append(subprocess.Popen([prometheus, f"--config.file={work / 'prometheus.yml'}",
                                       f"--storage.tsdb.path={work / 'data'}",
                                       f"--web.listen-address=127.0.0.1:{prom_port}", "--rules.alert.resend-delay=1s",
                                       "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        base = f"http://127.0.0.1:{prom_port}"
        until("Prometheus ready", READY_S, lambda: get(f"{base}/-/ready")[0] == 200)
        until("Alertmanager ready", READY_S, lambda: get(f"http://127.0.0.1:{am_port}/-/ready")[0] == 200)
        # The replay starts once Prometheus scrapes: none of its lead is lost to their start.
        sim = subprocess.Popen([python, "-m", "servewatch", "sim", "--replay", str(args.bundle),
                                "--port", replay_url.rsplit(":", 1)[1], "--speed", str(args.speed), "--start", f"{start:.3f}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        procs.append(sim)
        line = sim.stderr.readline()
        if "http://127.0.0.1:" not in line:
            raise Refused(f"sim --replay: {line.strip() or 'no address printed'}")
        asked = time.time()
        status, body = get(replay_url + "/_sim/replay")
        anchor_wall = (asked + time.time()) / 2
        if status != 200:
            raise Refused(f"sim --replay: its position could not be read ({status or 'no answer'})")
        state = json.loads(body)

        def bundle_time(wall: float) -> float:
            return telemetry.start + state["elapsed_s"] + (wall - anchor_wall) * args.speed

        if serve_port is not None:
            procs.append(subprocess.Popen(
                [python, "-m", "servewatch", "serve", "--target", f"replay={replay_url}", "--listen",
                 f"127.0.0.1:{serve_port}", "--interval", f"{telemetry.cadence:g}", "--no-probe"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))

        end_wall = anchor_wall + ((telemetry.end - telemetry.start - state["elapsed_s"]) + args.hold) / args.speed
        pending: dict[str, float] = {}
        firing: dict[str, float] = {}
        cleared: dict[str, float] = {}
        while time.time() < end_wall:
            status, body = get(f"{base}/api/v1/alerts")
            if status == 200:
                active = {a["labels"].get("alertname", "?") for a in json.loads(body)["data"]["alerts"]}
                for name in set(pending) - active:
                    cleared.setdefault(name, time.time())
                for name in active:
                    cleared.pop(name, None)
                for alert in json.loads(body)["data"]["alerts"]:
                    name = alert["labels"].get("alertname", "?")
                    active = rfc3339(alert["activeAt"])
                    pending.setdefault(name, active)
                    if alert["state"] == "firing":
                        firing.setdefault(name, active + duration_ms(fors.get(name, "0s")) / 1000 / args.speed)
            time.sleep(0.2)
        with receiver.lock:
            notified = dict(receiver.first)
    finally:
        for proc in reversed(procs):
            stop(proc)
        receiver.shutdown()
        shutil.rmtree(work, ignore_errors=True)

    def rel(wall: float | None) -> float | None:
        return None if wall is None else round(bundle_time(wall) - onset, 3)

    alerts = [{"alert": name, "severity": severity.get(name, ""), "for": fors.get(name, "0s"),
               "pending_s": rel(pending.get(name)), "firing_s": rel(firing.get(name)),
               "notified_s": rel(notified.get(name)), "cleared_s": rel(cleared.get(name))}
              for name in sorted(set(pending) | set(notified), key=lambda n: (pending.get(n, 1e300), n))]
    return {"bundle": Path(args.bundle).name, "dialect": telemetry.dialect, "speed": args.speed,
            "replayed_from_s": round(start, 3), "recorded_s": round(telemetry.end - telemetry.start, 3),
            "held_s": args.hold, "onset_s": round(onset - telemetry.start, 3),
            "incident": trigger["verdict"],
            "verdict_s": round(float(recorded["t"]) - onset, 3),
            "serve_watched": args.speed == 1, "scrape_interval_s": scrape_ms / 1000,
            "alerts": alerts, "rules": len(fors), "not_pending": sorted(set(fors) - set(pending) - set(notified))}


def report(result: dict) -> str:
    lines = [f"replayed {result['bundle']} ({result['dialect']}, {result['recorded_s']:.1f} s recorded) from "
             f"{result['replayed_from_s']:.1f} s at {result['speed']:g}x, its last state held {result['held_s']:g} s "
             f"after its end; Prometheus scraping every {result['scrape_interval_s'] * result['speed']:g} s "
             f"(bundle time)",
             f"the incident: {result['incident']}, onset {result['onset_s']:.1f} s into the bundle",
             f"servewatch's verdict came {clock_words(result['verdict_s'])} after the onset (recorded in the bundle)"]
    if not result["serve_watched"]:
        lines.append("servewatch serve was left out (its thresholds are real seconds; run at --speed 1 for the "
                     "Servewatch* alerts)")
    for a in result["alerts"]:
        said = f"{a['alert']} ({a['severity'] or 'no severity'}, for {a['for']})"
        if a["notified_s"] is not None:
            verb = "would have paged" if a["severity"] == "page" else "would have notified"
            lines.append(f"  {said}: {verb} {clock_words(a['notified_s'])} after the onset (Alertmanager's "
                         f"webhook; firing in Prometheus at {clock_words(a['firing_s'])})"
                         if a["firing_s"] is not None else f"  {said}: {verb} {clock_words(a['notified_s'])} after")
        elif a["firing_s"] is not None:
            lines.append(f"  {said}: firing {clock_words(a['firing_s'])} after the onset, not yet notified")
        elif a["cleared_s"] is not None:
            lines.append(f"  {said}: pending from {clock_words(a['pending_s'])} to {clock_words(a['cleared_s'])} "
                         f"after the onset, then cleared")
        else:
            lines.append(f"  {said}: pending from {clock_words(a['pending_s'])} after the onset; it fires if the "
                         f"condition holds {a['for']}")
    horizon = result["recorded_s"] - result["onset_s"] + result["held_s"]
    lines.append(f"  not even pending by {clock_words(horizon)} after the onset: {len(result['not_pending'])} of "
                 f"{result['rules']} alerts")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="replay_alerts.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", help="an incident bundle directory")
    parser.add_argument("--slo", required=True, help="the SLO file `servewatch rules` reads")
    parser.add_argument("--speed", type=float, default=1.0, help="bundle seconds per second (default 1)")
    parser.add_argument("--start", type=float, default=None,
                        help="replay from this many seconds into the bundle (default: --lead before the onset)")
    parser.add_argument("--lead", type=float, default=30.0, help="bundle seconds replayed before the onset (default 30)")
    parser.add_argument("--hold", type=float, default=30.0,
                        help="bundle seconds the last recorded state is held after the end (default 30)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the report")
    args = parser.parse_args(argv)
    try:
        result = run(args)
    except Refused as exc:
        print(f"replay_alerts: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
