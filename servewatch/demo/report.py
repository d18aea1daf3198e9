"""The demo's report: report.html (one file, inline SVG, opens offline) and report.md.

Sections: what health checks missed (each verdict, its evidence, its detection time, what /health said);
the signature table of the four workloads; latency distributions per scenario with the blindness note where it
applies; one section per incident bundle with its timeline chart, verdicts and runbook branches.
"""

from __future__ import annotations

from pathlib import Path

from servewatch.demo.result import DemoResult, PhaseResult
from servewatch.dialects import by_name
from servewatch.bundle import report_html as H
from servewatch.bundle.incident import load_incident

SIGNATURE_ROWS = (
    ("Tokens in / out (average)", None),
    ("Queue wait (s)", "queue_wait_s"),
    ("Prompt prefill (s)", "prefill_s"),
    ("TTFT (s)", "ttft_s"),
    ("Between two tokens (s)", "itl_s"),
    ("Token generation (s)", "generation_s"),
    ("E2E (s)", "e2e_s"),
    ("Running - maximum", "max_running"),
    ("Waiting - maximum", "max_waiting"),
    ("KV cache - maximum", "max_kv"),
)


def signature_rows(scenarios: list[PhaseResult]) -> list[list[str]]:
    rows = []
    for label, key in SIGNATURE_ROWS:
        row = [label]
        for p in scenarios:
            sig = p.summary.get("signature", {})
            if key is None:
                row.append(f"{_n(sig.get('tokens_in'), 0)} / {_n(sig.get('tokens_out'), 0)}")
            elif key == "max_kv":
                row.append("–" if sig.get(key) is None else f"{sig[key]:.1%}")
            elif key.startswith("max_"):
                row.append(_n(sig.get(key), 0))
            else:
                row.append(_n(sig.get(key), 3))
        rows.append(row)
    return rows


NO_FAULT = "in a workload, no fault injected"   # a verdict the workload itself earned (overload)


def verdict_rows(result: DemoResult) -> list[list[str]]:
    rows = []
    for p in result.phases:
        for f in p.fired:
            detection = p.detection_s(f)
            rows.append([p.phase.name, f.verdict.name,
                         NO_FAULT if detection is None else f"{detection:.1f} s after the fault",
                         f"{f.verdict.since_s:.1f} s", _health(p) if p.phase.is_fault else "–", f.verdict.why])
    return rows


def _health(p: PhaseResult) -> str:
    return ", ".join(f"{status}: {n}" for status, n in sorted(p.health.items())) or "no probe"


def _n(value, digits: int) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def latency_section(result: DemoResult) -> str:
    dialect = by_name(result.dialect)
    edges = _client_edges(dialect)
    parts = [f"<p>Client-side exact values of every successful request, binned on {result.dialect}'s own bucket "
             "edges so you can see what the server's histograms can and cannot resolve.</p>" if dialect.latency_edges
             else f"<p>Client-side exact values of every successful request, binned on a 1-2.5-5 ladder of seconds: "
                  f"{H.esc(dialect.title or result.dialect)} exports no latency histograms.</p>"]
    if any(_blind_notes(p) for p in result.scenarios):
        # The note once; under each workload only what its own histograms could not resolve.
        parts.append("<p class=\"note\">" + H.esc(H.HISTOGRAM_BLINDNESS_NOTE) + "</p>")
    for p in result.scenarios:
        ok = [r for r in p.records if r.ok]
        values = {"TTFT": [r.ttft_s for r in ok if r.ttft_s is not None],
                  "ITL (per token)": [x for r in ok for x in r.itl_token_s],
                  "E2E": [r.e2e_s for r in ok if r.e2e_s is not None]}
        charts = []
        for (name, vals), bucket_edges in zip(values.items(), edges):
            charts.append(H.render_histogram_svg(bucket_edges, H.bin_values(vals, bucket_edges),
                                                 title=f"{p.phase.name}: {name}"))
        parts.append(f"<h3>{H.esc(p.phase.name)}</h3><div class=\"charts\">{''.join(charts)}</div>")
        blind = _blind_notes(p)
        if blind:
            parts.append("<p>Blind histograms in this workload:</p><ul>"
                         + "".join(f"<li>{H.esc(line)}</li>" for line in blind) + "</ul>")
    return "".join(parts)


# Where the engine exports no latency histogram of a kind, the client's values are binned here.
LADDER_EDGES = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0)


def _client_edges(dialect) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(dialect.latency_edges.get(kind, LADDER_EDGES)) for kind in ("ttft", "itl", "e2e"))


def _blind_notes(p: PhaseResult) -> list[str]:
    return [f["finding"] for f in p.summary.get("server_blindness", [])]


def build_html(result: DemoResult) -> str:
    scenarios = result.scenarios
    sections = [
        H.Section("What health checks missed", _missed_html(result), anchor="verdicts"),
        H.Section("Signature of four workloads",
                  H.render_table(["", *[p.phase.name for p in scenarios]], signature_rows(scenarios),
                                 caption="Averages over the requests of each scenario, read from /metrics where the "
                                         "server exposes them; the last three rows are maxima of the sampled "
                                         "gauges.") + _signature_note(scenarios), anchor="signatures"),
        H.Section("Latency distributions", latency_section(result), anchor="latency"),
    ]
    for i, bundle in enumerate(result.bundles):
        try:
            incident = load_incident(bundle)
        except Exception as exc:  # noqa: BLE001 - a bad bundle is reported, the rest of the report stands
            sections.append(H.Section(f"Incident {Path(bundle).name}", f"<p>unreadable: {H.esc(exc)}</p>"))
            continue
        sections.append(H.incident_section(incident, anchor=f"incident-{i + 1}"))
    subtitle = (f"{result.dialect} built-in engine, {'virtual' if result.mode == 'virtual' else 'real'} time, "
                f"{len(result.phases)} phases in {result.wall_s:.0f} s of wall time")
    return H.render_report("servewatch demo report", sections, subtitle=subtitle)


def _missed_html(result: DemoResult) -> str:
    table = H.render_table(["phase", "verdict", "detected", "since onset", "/health meanwhile", "evidence"],
                           verdict_rows(result))
    lines = []
    for p in result.incidents:
        lines.append(f"<li><b>{H.esc(p.phase.name)}</b>: /health answered {H.esc(_health(p))} "
                     f"from the fault to the end of the phase; "
                     f"{sum(1 for r in p.records if r.error == 'truncated')} request(s) were cut short"
                     f" and {sum(1 for r in p.records if r.ok)} completed.</li>")
    missing = result.missing_verdicts()
    warn = (f"<p class=\"warn\">Expected but not seen: {H.esc(', '.join(missing))}</p>" if missing else "")
    return f"{table}<ul>{''.join(lines)}</ul>{warn}"


SIGNATURE_NOTE = ("For comparison, the same four workloads on a real vLLM serving Qwen2.5-7B-Instruct-AWQ on "
                  "one RTX 3060: queue wait only under overload (0.472 s, 44 waiting), running pinned at 256 "
                  "while KV was 28%: out of slots, not memory; long output has the worst E2E with a normal "
                  "TTFT; long prompt's signature is its 2,905 input tokens (its prefill is swallowed by the "
                  "prefix cache because every request sends the same prompt — here too).")


def _signature_note(scenarios: list[PhaseResult]) -> str:
    return f"<p>{H.esc(SIGNATURE_NOTE)}</p>"


def build_markdown(result: DemoResult) -> str:
    scenarios = result.scenarios
    lines = ["# servewatch demo report", "",
             f"{result.dialect} built-in engine, {result.mode} time, wall {result.wall_s:.0f} s.", "",
             "## What health checks missed", "",
             "| phase | verdict | detected | since onset | /health meanwhile | evidence |",
             "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in verdict_rows(result)]
    missing = result.missing_verdicts()
    if missing:
        lines += ["", f"**Expected but not seen:** {', '.join(missing)}"]
    lines += ["", "## Signature of four workloads", "",
              "| | " + " | ".join(p.phase.name for p in scenarios) + " |",
              "|---|" + "---:|" * len(scenarios)]
    lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in signature_rows(scenarios)]
    lines += ["", SIGNATURE_NOTE]
    lines += ["", "## Incident bundles", ""]
    lines += [f"- `{b}` (check with `servewatch verify {b}`)" for b in result.bundles] or ["- none"]
    return "\n".join(lines) + "\n"


def _md(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def write_reports(result: DemoResult, out_dir: Path) -> tuple[Path, Path]:
    html_path, md_path = out_dir / "report.html", out_dir / "report.md"
    html_path.write_text(build_html(result), encoding="utf-8")
    md_path.write_text(build_markdown(result), encoding="utf-8")
    return html_path, md_path
