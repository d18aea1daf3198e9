"""The drill's report: drill.json (checked against schema/drill.schema.json), drill.md and drill.html
(in the style of the demo's report.html: servewatch.bundle.report_html). One row per fault: what was
injected, what detected it and when, /health meanwhile, when a kubelet would have restarted the pod,
client impact, recovery, and whether the expectations were met. No prompt, completion, request id or
path goes into any of them."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from servewatch.drill.expect import describe_answers
from servewatch.drill.measure import KUBELET_TIMEOUT_S, exit_words
from servewatch.errors import INCONCLUSIVE

COLUMNS = ("#", "fault", "injected on", "detected by (s after injection)", "/health meanwhile",
           "kubelet restart: /health", "kubelet restart: livez", "demanded, and what acted", "client impact", "recovery",
           "expectations")

TARGET_MEANING = ("target", "the plan's target the fault ran on (main: the plan's target:, the others its targets:)")
COLUMN_MEANINGS = (
    ("injected on", "the process signalled (role, rank, pid) or what else the fault acted on"),
    ("detected by", "each servewatch verdict the recorder concluded after the injection, with its delay"),
    ("/health meanwhile", "what /health answered while the fault held (probed every 0.5 s)"),
    ("kubelet restart: /health", "when a liveness probe on /health (period 10 s, timeout 1 s, failureThreshold 3) "
                                 "would have restarted the pod, after the injection; – never"),
    ("kubelet restart: livez", "the same probe on servewatch's livez (fails only while a verdict of the restart "
                               "class holds with its evidence), as the fault really lasted"),
    ("demanded, and what acted", "what the fault's truth demanded (restart: only a restart helps; none: a busy "
                                 "server, left be), then when guard with its defaults and livez acted (the restart-class "
                                 "verdict, its evidence held) and the latest a kubelet on livez would restart had the "
                                 "fault lasted (the first failing livez plus three 10 s periods)"),
    ("client impact", "requests failed of those sent in the step, by error class; TTFT p50 during the fault "
                      "against before it"),
    ("recovery", "from the end of the fault to the first good request completed after it; the server's exit "
                 "status when it exited; when the recorder cleared the verdicts the fault raised; when tokens moved "
                 "again (the first token the requests held across the fault's end got after it); guard's kill of the "
                 "tree when guard recorded the step; the drill's own restart of a server it had to start again"),
    ("expectations", "met when every expectation of the plan held; inconclusive when one did not while the recorder "
                     "was starved (its own sampling had a gap over twice its interval: the watcher was not run)"),
)


def _target(spec, started) -> dict:
    """One of the plan's targets, and what the drill did with it (`started`: None when no step ran on it)."""
    return {"description": spec.describe(), "dialect": started.dialect if started else None,
            "restarts_by_drill": len(started.restarts) if started else 0,
            "ready_s": list(started.ready_s) if started else []}


def document(run) -> dict:
    plan = run.plan
    results = [r.to_json() for r in run.results]
    failed = [r.index for r in run.results if not r.met and not r.inconclusive]
    inconclusive = [r.index for r in run.results if r.inconclusive]
    return {
        "schema": "servewatch.drill/1",
        "plan": plan.to_json(),
        "target": {**_target(plan.target, run.targets.get("main")), "existing": plan.target.existing,
                   "consent": run.consent},
        "targets": {name: _target(spec, run.targets.get(name)) for name, spec in plan.targets.items()},
        "started": run.started, "ended": run.ended,
        "duration_s": round((run.ended or 0) - (run.started or 0), 1),
        "faults": results,
        "leaks": run.leaks,
        "expectations_met": not failed and not inconclusive and bool(run.leaks.get("ok", False)),
        "failed_faults": failed,
        "inconclusive_faults": inconclusive,
    }


INCONCLUSIVE_EXIT = INCONCLUSIVE   # neither passed nor failed: a fault missed while the recorder was starved


def exit_status(doc: dict) -> int:
    """The drill's exit status: 1 when a fault failed or could not run or something leaked; else 4 when a fault was
    inconclusive (it missed while the recorder was starved: not a pass, not a miss); else 0."""
    if doc["failed_faults"] or not doc["leaks"].get("ok", False):
        return 1
    return INCONCLUSIVE_EXIT if doc.get("inconclusive_faults") else 0


def validate(doc: dict) -> None:
    import jsonschema

    schema = json.loads(resources.files("servewatch.drill").joinpath("schema/drill.schema.json").read_text())
    jsonschema.validate(doc, schema)


def _injected(r: dict) -> str:
    parts = [f"{t['signal']} {t['role']} {t['rank']} (pid {t['pid']})" for t in r["touched"]]
    facts = r.get("facts") or {}
    parts += [f"{k.replace('_', ' ')} {v:g}" if isinstance(v, float) else f"{k.replace('_', ' ')} {v}"
              for k, v in sorted(facts.items()) if not isinstance(v, dict)]
    parts += [f"{k.replace('_', ' ')}: {_answer(v) if k.startswith('decode_after') else describe_answers(v)}"
              for k, v in sorted(facts.items()) if isinstance(v, dict)]
    return "; ".join(parts) or "–"


def _answer(outcome: dict) -> str:
    """A request's decode leg a pair's fault handed over ({status, seconds}, empty while it had not ended):
    "HTTP 500 after 0.21 s", "no answer after 16 s", "no end within the hold"."""
    if "seconds" not in outcome:
        return "no end within the hold"
    status = outcome.get("status")
    return f"{f'HTTP {status}' if status is not None else 'no answer'} after {outcome['seconds']:g} s"


def _detected(r: dict) -> str:
    if not r["detected"]:
        return "nothing"
    return ", ".join(f"{v} {s:g}" for v, s in sorted(r["detected"].items(), key=lambda kv: kv[1]))


def _s(value) -> str:
    return "–" if value is None else f"{value:g} s"


def _impact(r: dict) -> str:
    i = r["impact"]
    if not i or not i.get("requests"):
        return "no requests"
    errors = ", ".join(f"{k} {n}" for k, n in i["errors"].items())
    text = f"{i['failed']}/{i['requests']} failed" + (f" ({errors})" if errors else "")
    if i.get("ttft_inflation") is not None:
        text += f"; TTFT x{i['ttft_inflation']:g}"
    return text


def _recovery(r: dict) -> str:
    parts = []
    kill = (r.get("guard") or {}).get("kill")
    if kill:
        after = kill["after_verdict_s"]
        parts.append(f"guard killed the tree ({kill['killed']} process{'' if kill['killed'] == 1 else 'es'}) "
                     + (f"{after:g} s after {r['guard']['acted_on']}" if after is not None
                        else f"{kill['after_s']:g} s after the injection"))
    gone = r.get("server_exit") or {}
    if gone.get("status") is not None:
        parts.append(f"the server exited ({exit_words(gone['status'])})")
    if r.get("cleared"):
        parts.append("cleared " + ", ".join(f"{v} {s:g} s" for v, s in sorted(r["cleared"].items(), key=lambda kv: kv[1]))
                     + " after the fault")
    if r.get("resumed_s"):
        parts.append(f"tokens again {r['resumed_s']:g} s after the fault")
    if r["recovery_s"] is not None:
        parts.append(f"good request after {r['recovery_s']:g} s")
    if r["restarted_by_drill_s"] is not None:
        parts.append(f"restarted by the drill in {r['restarted_by_drill_s']:g} s")
    return "; ".join(parts) or "–"


def _verdict(r: dict) -> str:
    if r["not_run"]:
        return f"NOT RUN: {r['not_run']}"
    missed = [c for c in r["checks"] if not c["met"]]
    if not missed:
        return f"met ({len(r['checks'])})"
    if r.get("inconclusive"):        # not a miss: the recorder was not run meanwhile (expect.inconclusive)
        return (f"inconclusive: {r['inconclusive']}; not met meanwhile: "
                + "; ".join(f"{c['expectation']} ({c['observed']})" for c in missed))
    return "FAILED: " + "; ".join(f"{c['expectation']} ({c['observed']})" for c in missed)


def columns(doc: dict) -> tuple[str, ...]:
    """The faults table's columns: with the target each fault ran on when the plan has more than one."""
    return (*COLUMNS[:2], "target", *COLUMNS[2:]) if doc["targets"] else COLUMNS


def meanings(doc: dict) -> tuple[tuple[str, str], ...]:
    return (TARGET_MEANING, *COLUMN_MEANINGS) if doc["targets"] else COLUMN_MEANINGS


def rows(doc: dict) -> list[list[str]]:
    return [[str(r["index"]), r["name"], *([r["target"]] if doc["targets"] else []), _injected(r), _detected(r),
             describe_answers(r["health"]) + _slow(r) + (f"; serve's livez {describe_answers(r['livez'])}"
                                                         if r.get("livez") else "")
             + (f", readyz {describe_answers(r['readyz'])}" if r.get("readyz") else ""), _s(r["kubelet_health_s"]), _s(r["kubelet_livez_s"]), _policy(r), _impact(r),
             _recovery(r), _verdict(r)]
            for r in doc["faults"]]


def _policy(r: dict) -> str:
    from servewatch.drill.expect import policy_words

    policy = r.get("policy")
    if not policy:
        return "–"
    return f"{policy['demands']}: {policy_words(policy)}"


def _slow(r: dict) -> str:
    """The slowest /health answer while the fault held, when a kubelet would have counted it failed and every
    probe was answered while it held (beside "no answer" it says nothing more: those waited the probe's timeout)."""
    slowest = r.get("health_slowest_s")
    if slowest is None or slowest <= KUBELET_TIMEOUT_S or not r["health"] or \
            not all(str(answer).isdigit() for answer in r["health"]):
        return ""
    return f" (slowest {slowest:g} s, over a kubelet's {KUBELET_TIMEOUT_S:g} s timeout)"


def _summary_line(doc: dict) -> str:
    met = sum(1 for r in doc["faults"] if r["met"])
    starved = len(doc.get("inconclusive_faults", ()))
    unsure = (f", {starved} inconclusive (the recorder was starved: not scored a miss, not a pass)"
              if starved else "")
    leaks = doc["leaks"]
    leak = ("no leaks" if leaks.get("ok") else
            f"leaks: {leaks.get('processes_left', 0)} process(es) left, {leaks.get('ports_held', 0)} port(s) held")
    others = "".join(f" and {name}, {t['description']}" for name, t in doc["targets"].items())
    return (f"{doc['plan']['name']} on {doc['target']['description']}{others}: {met} of {len(doc['faults'])} faults met "
            f"their expectations{unsure} in {doc['duration_s']:g} s; {leak}")


def markdown(doc: dict) -> str:
    lines = [f"# Drill: {doc['plan']['name']}", "", _summary_line(doc), ""]
    if doc["target"]["existing"]:
        lines += [f"Existing server, drilled with the operator's consent: {'yes' if doc['target']['consent'] else 'no'}.",
                  ""]
    lines += ["| " + " | ".join(columns(doc)) + " |", "|" + "---|" * len(columns(doc))]
    for row in rows(doc):
        lines.append("| " + " | ".join(c.replace("|", "/") for c in row) + " |")
    lines += ["", "## Checks", ""]
    for r in doc["faults"]:
        for c in r["checks"]:
            lines.append(f"- {r['index']}. {r['name']}: {c['expectation']}: {'met' if c['met'] else 'NOT MET'} "
                         f"({c['observed']})")
        for note in r["notes"]:
            lines.append(f"- {r['index']}. {r['name']}: note: {note}")
    lines += ["", "## Bundles", ""]
    for r in doc["faults"]:
        b = r["bundles"]
        if b:
            lines.append(f"- {r['index']}. {r['name']}: {b['written']} written, {b['verified']} verified, "
                         f"{b['write_failures']} could not be written")
    lines += ["", "## Columns", ""] + [f"- **{k}**: {v}" for k, v in meanings(doc)]
    return "\n".join(lines) + "\n"


def html(doc: dict) -> str:
    from servewatch.bundle import report_html as H

    sections = [
        H.Section("Faults", H.render_table(columns(doc), rows(doc)), anchor="faults"),
        H.Section("Checks", H.render_table(("#", "fault", "expectation", "met", "observed"),
                                           [(r["index"], r["name"], c["expectation"], "met" if c["met"] else "NOT MET",
                                             c["observed"]) for r in doc["faults"] for c in r["checks"]]),
                  anchor="checks"),
        H.Section("Leaks and bundles", H.render_facts(
            [("processes left", doc["leaks"].get("processes_left")), ("ports held", doc["leaks"].get("ports_held")),
             *((f"{r['index']}. {r['name']}", f"{r['bundles'].get('written', 0)} bundle(s) written, "
                f"{r['bundles'].get('verified', 0)} verified, {r['bundles'].get('write_failures', 0)} not written")
               for r in doc["faults"] if r["bundles"])]), anchor="leaks"),
        H.Section("What the columns mean", H.render_facts(meanings(doc)), anchor="columns"),
    ]
    return H.render_report(f"servewatch drill: {doc['plan']['name']}", sections, subtitle=_summary_line(doc))


def write(doc: dict, out_dir: Path) -> list[Path]:
    validate(doc)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "drill.json", out_dir / "drill.md", out_dir / "drill.html"]
    paths[0].write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(doc), encoding="utf-8")
    paths[2].write_text(html(doc), encoding="utf-8")
    return paths
