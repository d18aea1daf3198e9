"""A fault's expectations against what was measured: one check per expectation, met or not, with what
was observed in words a reader can check."""

from __future__ import annotations

from servewatch.detectors import registry


def check(expect, result) -> list[dict]:
    checks: list[dict] = []

    def add(what: str, met: bool, observed: str) -> None:
        checks.append({"expectation": what, "met": bool(met), "observed": observed})

    detected = result.detected
    for verdict, within in expect.fire.items():
        took = detected.get(verdict)
        add(f"{verdict} within {within:g} s", took is not None and took <= within,
            "not fired" if took is None else f"after {took:g} s")
    if expect.fire_any:
        names, within = expect.fire_any
        hits = {n: detected[n] for n in names if n in detected}
        first = min(hits.items(), key=lambda kv: kv[1]) if hits else None
        add(f"one of {', '.join(names)} within {within:g} s", first is not None and first[1] <= within,
            "none fired" if first is None else f"{first[0]} after {first[1]:g} s")
    for verdict in expect.not_fire:
        took = detected.get(verdict)
        add(f"no {verdict}", took is None, "not fired" if took is None else f"fired after {took:g} s")
    if expect.no_incident:
        incidents = sorted(n for n in detected if registry.is_incident(n))
        add("no incident verdict", not incidents, ", ".join(incidents) or "none")
    if expect.health != "any":
        answers = result.health
        failing = sum(n for k, n in answers.items() if k != "200")
        observed = describe_answers(answers)
        if expect.health == "ok":
            add("/health stays 200 while the fault holds", failing == 0 and bool(answers), observed)
        else:
            add("/health fails while the fault holds", failing > 0, observed)
    if expect.max_error_rate is not None:
        rate = result.impact.get("error_rate", 0.0)
        add(f"at most {expect.max_error_rate:.0%} of requests fail", rate <= expect.max_error_rate,
            f"{result.impact.get('failed', 0)} of {result.impact.get('requests', 0)} ({rate:.0%})")
    if expect.recover_within_s is not None:
        took = result.recovery_s
        add(f"a good request within {expect.recover_within_s:g} s after the fault",
            took is not None and took <= expect.recover_within_s,
            "no good request after the fault" if took is None else f"after {took:g} s")
    if expect.bundle_write_fails is not None:
        failures = result.bundles.get("write_failures", 0)
        add("the recorder reports bundles it could not write" if expect.bundle_write_fails
            else "every bundle is written", (failures > 0) == expect.bundle_write_fails,
            f"{failures} write failure(s), {result.bundles.get('written', 0)} written")
    return checks


def describe_answers(answers: dict[str, int]) -> str:
    if not answers:
        return "no probe in the window"
    return ", ".join(f"{k} x{n}" for k, n in sorted(answers.items(), key=lambda kv: -kv[1]))
