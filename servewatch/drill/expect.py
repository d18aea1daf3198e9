"""A fault's expectations against what was measured: one check per expectation, met or not, with what
was observed in words a reader can check."""

from __future__ import annotations

from servewatch.detectors import registry
from servewatch.sources.probe import PREEMPTED_WORDS


def check(expect, result) -> list[dict]:
    checks: list[dict] = []

    def add(what: str, met: bool, observed: str, over: float | None = None) -> None:
        """`over`: how far a time bound was overshot (seconds), kept on a miss as over_s (`inconclusive` reads it)."""
        checks.append({"expectation": what, "met": bool(met), "observed": observed,
                       **({"over_s": round(over, 2)} if not met and over is not None and over > 0 else {})})

    detected = result.detected
    # a pair's step: `detected` holds the verdicts naming the side at fault, `elsewhere` those naming another
    elsewhere = getattr(result, "elsewhere", None) or {}
    side = f" naming the {result.facts['side']}" if "side" in result.facts else ""

    def missing(verdict: str) -> str:
        return (f"not fired{side}; fired naming the other side after {elsewhere[verdict]:g} s" if verdict in elsewhere
                else f"not fired{side}" if side else "not fired")

    for verdict, within in expect.fire.items():
        took = detected.get(verdict)
        add(f"{verdict}{side} within {within:g} s", took is not None and took <= within,
            missing(verdict) if took is None else f"after {took:g} s", _over(took, within))
    if expect.fire_any:
        names, within = expect.fire_any
        hits = {n: detected[n] for n in names if n in detected}
        first = min(hits.items(), key=lambda kv: kv[1]) if hits else None
        other = sorted(n for n in names if n in elsewhere)
        add(f"one of {', '.join(names)}{side} within {within:g} s", first is not None and first[1] <= within,
            (f"none fired{side}" + (f"; {', '.join(other)} named the other side" if other else "")) if first is None
            else f"{first[0]} after {first[1]:g} s", _over(first and first[1], within))
    for verdict, allowance in expect.fire_by_threshold.items():
        took, threshold = detected.get(verdict), result.thresholds.get(verdict)
        what = f"{verdict} at its own threshold \u00b1 {allowance:g} s"
        if took is None or threshold is None:
            add(what, False, "not fired" if took is None else f"after {took:g} s; no threshold in its bundle")
        else:
            add(what, threshold - allowance <= took <= threshold + allowance,
                f"after {took:g} s, threshold {threshold:g} s", _over(took, threshold + allowance))
    for verdict in expect.not_fire:         # on any side
        took = detected.get(verdict, elsewhere.get(verdict))
        add(f"no {verdict}", took is None, "not fired" if took is None else f"fired after {took:g} s")
    if expect.no_incident:
        incidents = sorted(n for n in {*detected, *elsewhere} if registry.is_incident(n))
        add("no incident verdict", not incidents, ", ".join(incidents) or "none")
    if expect.no_verdict:
        seen = sorted({*detected, *elsewhere, *result.fired_before})
        add("no verdict at all", not seen, ", ".join(seen) or "none")
    if expect.names:
        add(*_names(expect, result))
    if expect.health != "any":
        add(*_answered("/health", expect.health, result.health))
    if expect.max_error_rate is not None:
        rate = result.impact.get("error_rate", 0.0)
        add(f"at most {expect.max_error_rate:.0%} of requests fail", rate <= expect.max_error_rate,
            f"{result.impact.get('failed', 0)} of {result.impact.get('requests', 0)} ({rate:.0%})")
    if expect.recover_within_s is not None:
        took = result.recovery_s
        add(f"a good request within {expect.recover_within_s:g} s after the fault",
            took is not None and took <= expect.recover_within_s,
            "no good request after the fault" if took is None else f"after {took:g} s",
            _over(took, expect.recover_within_s))
    if expect.recover_requests is not None:
        add(*_recovered(expect, result))
    if expect.restart_within_s is not None or expect.no_restart:
        add(*_restart(expect, result.policy or {}))
    if expect.guard is not None:
        for item in _guard(expect.guard, result):
            add(*item)
        other_side = (result.guard or {}).get("other_side")
        if other_side is not None:       # a pair: guard holding the other side never acts on this fault
            add("guard on the other side does nothing", not other_side["acted"] and other_side["exit"] != 3,
                ("it acted" if other_side["acted"] else "no action") + f"; guard exit {_code(other_side['exit'])}")
    if expect.clear_within_s is not None:
        for item in _cleared(expect, result):
            add(*item)
    if expect.livez != "any":
        aimed = result.facts.get("fault_on", result.facts.get("side"))     # a pair: the livez of the side aimed at
        add(*_answered("servewatch serve's livez" + (f" of the {aimed}" if aimed else ""), expect.livez,
                       result.livez or {}))
    if getattr(result, "livez_other", None) is not None:     # a pair under serve: the other side is never failed
        add(*_answered("servewatch serve's livez of the other side", "ok", result.livez_other))
    if expect.readyz != "any":
        add(*_answered("servewatch serve's readyz", expect.readyz, result.readyz or {}))
    if expect.ready_within_s is not None:
        took = result.ready_s
        add(f"/health 200 within {expect.ready_within_s:g} s of the start", took is not None and
            took <= expect.ready_within_s, f"after {took:g} s" if took is not None else
            result.facts.get("start", "not up"))
    if expect.exit_within_s is not None:
        for item in _exit(expect.exit_within_s, result):
            add(*item)
    if expect.in_flight_cut:
        add(*_cut(result.impact.get("in_flight_at_fault")))
    if expect.probe_preempted:
        said = result.facts.get("probe")
        add("a routine probe in flight gave way to an urgent one", bool(said) and PREEMPTED_WORDS in said,
            said or "the recorder said nothing of its probes")
    for literal, seen in result.log_seen.items():
        add(f"the server's log shows \u201c{literal}\u201d after the injection", seen, "shown" if seen else "not shown")
    written, verified = result.bundles.get("written", 0), result.bundles.get("verified", 0)
    if expect.bundle_write_fails is None and written:      # a full disk may leave bundles half written
        add("every bundle written verifies", verified == written, f"{verified} of {written} verified")
    if "holding_model_path" in result.bundles:          # privacy: the served model's path, in no bundle
        held = result.bundles["holding_model_path"]
        add("no bundle holds the served model's path", held == 0, f"{held} file(s) hold it" if held else
            f"in none of the {written} bundle(s)")
    if expect.bundle_write_fails is not None:
        failures = result.bundles.get("write_failures", 0)
        add("the recorder reports bundles it could not write" if expect.bundle_write_fails
            else "every bundle is written", (failures > 0) == expect.bundle_write_fails,
            f"{failures} write failure(s), {result.bundles.get('written', 0)} written")
    return checks


STARVED_SHARE = 0.25     # of a step's window the recorder spent starved: none of its expectations measured the code


def inconclusive(checks: list[dict], starved_s: float, frozen_s: float = 0.0, window_s: float = 0.0) -> str | None:
    """A step that missed while the recorder was starved (its own sampling had gaps over twice its interval plus an
    allowance: `starved_s` the longest, `frozen_s` their time within the step's `window_s`) is inconclusive, said
    "recorder starved N s", not a miss: when every miss is a time bound overshot (over_s: a verdict, a clearing,
    an action or a good request late; after a gap the detectors need their own hold again, so a detection can be
    late by more than the gap: 14 s against 5 s with a 7 s gap), or when the recorder spent STARVED_SHARE or more
    of the window starved (then nothing of the step measured the code: the conformance suite's rule for its
    freezes, tests/conformance/test_7_drill.py). Any other miss stays a miss (a verdict that must not fire and
    did, one that never fired, a wrong /health); a step that met every expectation is met; one with no gap is
    scored as it is."""
    missed = [c for c in checks if not c["met"]]
    if starved_s <= 0 or not missed:
        return None
    explained = all(c.get("over_s") is not None for c in missed)
    if not explained and not (window_s > 0 and frozen_s >= STARVED_SHARE * window_s):
        return None
    return f"recorder starved {starved_s:g} s"


def _recovered(expect, result) -> tuple[str, bool, str, float | None]:
    """The recovery bound counted in requests: N x a request's length at this load, as the step's own good
    requests outside the fault measured it (the engine's speed on this machine), + plus_s."""
    n, plus, took = expect.recover_requests, expect.recover_plus_s, result.recovery_s
    length = result.impact.get("e2e_outside_s")
    if length is None:
        return (f"a good request within {n:g} requests' length + {plus:g} s after the fault", False,
                "no good request outside the fault to measure a request's length by", None)
    bound = round(n * length + plus, 2)
    return (f"a good request within {n:g} x {length:g} s (a request's length outside the fault) + {plus:g} s "
            f"= {bound:g} s after the fault", took is not None and took <= bound,
            "no good request after the fault" if took is None else f"after {took:g} s", _over(took, bound))


def _over(took: float | None, bound: float | None) -> float | None:
    """How far `took` overshot `bound` (negative: within it), or None without a figure; `check` keeps it only on a
    miss and only above 0."""
    return None if took is None or bound is None else took - bound


def _answered(what: str, wanted: str, answers: dict[str, int]) -> tuple[str, bool, str]:
    """An endpoint's answers while the fault held against `wanted`: "ok" (only 200s, at least one) or "failing"
    (at least one that is not 200)."""
    failing = sum(n for k, n in answers.items() if k != "200")
    if wanted == "ok":
        return f"{what} stays 200 while the fault holds", failing == 0 and bool(answers), describe_answers(answers)
    return f"{what} fails while the fault holds", failing > 0, describe_answers(answers)


def describe_answers(answers: dict[str, int]) -> str:
    if not answers:
        return "no probe in the window"
    return ", ".join(f"{k} x{n}" for k, n in sorted(answers.items(), key=lambda kv: -kv[1]))


def _names(expect, result) -> tuple[str, bool, str]:
    """The verdict that met fire / fire_any (the first of them to fire) says each of expect.names in its
    explanation; {pid} and {title} stand for the first process the fault signalled."""
    wanted = [_fill(text, result) for text in expect.names]
    what = names_words(wanted)
    candidates = met_candidates(expect)
    fired = sorted((result.detected[v], v) for v in candidates if v in result.detected)
    if not fired:
        return what, False, "no such verdict fired"
    verdict = fired[0][1]
    why = result.explained.get(verdict, "")
    missing = [w for w in wanted if w not in why]
    shown = why if len(why) <= 600 else why[:597] + "..."
    return what, not missing, f"{verdict}: {shown}" if why else f"{verdict}: no explanation recorded"


def met_candidates(expect) -> list[str]:
    """The verdicts a fault must fire (fire, fire_any, fire_by_threshold): what names and clearing are read from."""
    return [*expect.fire, *(expect.fire_any[0] if expect.fire_any else ()), *expect.fire_by_threshold]


def names_words(texts) -> str:
    """The `names` expectation in words: the dry run's (placeholders as written) and the check's (filled in)."""
    return "the verdict names " + "; ".join(f"\u201c{w}\u201d" for w in texts)


def _fill(text: str, result) -> str:
    """{pid} and {title} in a plan's text: the first process the fault signalled."""
    touched = result.touched[0] if result.touched else {}
    return text.replace("{pid}", str(touched.get("pid", "?"))).replace("{title}", str(touched.get("title", "?")))


def _guard(expect, result) -> list[tuple[str, bool, str]]:
    """What guard did (result.guard, measure.guard_outcome) against what the plan says it must."""
    g = result.guard or {}
    stacks, kill, code = g.get("stacks"), g.get("kill"), g.get("exit")
    acted = (f"on {g['acted_on']}" + (f" ({g['verdict_s']:g} s after the injection)" if g.get("verdict_s") is not None
                                       else "")) if g.get("acted_on") else "on no verdict"
    if not expect.kills:
        did = [what for what, line in (("stacks", stacks), ("a kill", kill)) if line]
        return [("guard leaves the server alone (no stacks, no kill)", not did and code in (None, 0),
                 f"{' and '.join(did)} {acted}" if did else f"no action; guard exit {_code(code)}")]
    checks = []
    if kill is None:
        checks.append(("guard kills the tree", False, f"no kill; guard exit {_code(code)}"))
    else:
        after = kill["after_verdict_s"]
        held = g.get("evidence_s", g.get("verdict_s"))
        later = held is not None and g.get("verdict_s") is not None and held > g["verdict_s"]
        took = "" if after is None else f", {after:g} s after " + ("its evidence held" if later else "the verdict")
        if after is not None and stacks and held is not None:
            took += f" (the stacks took {stacks['after_s'] - held:.2f} s of it)"
        if later:
            took += f"; the evidence held {held - g['verdict_s']:.2f} s after the firing"
        checks.append(("guard kills the tree" + (f" within {expect.within_s:g} s of its verdict's evidence"
                                                   if expect.within_s else ""),
                       kill["survivors"] == 0 and (expect.within_s is None or (after is not None and after <= expect.within_s)),
                       f"{kill['killed']} killed, {kill['survivors']} survived, {acted}{took}",
                       _over(after, expect.within_s) if kill["survivors"] == 0 else None))
    checks.append((f"guard exits {expect.exit} ({EXIT_WORDS.get(expect.exit, 'as the plan says')})",
                   code == expect.exit, f"exit {_code(code)}"))
    if expect.says:
        said = g.get("said") or ""
        missing = [w for w in expect.says if w not in said]
        checks.append(("guard's last line says " + "; ".join(f"\u201c{w}\u201d" for w in expect.says), not missing,
                       f"\u201c{said}\u201d" if said else "no exit line read"))
    checks.append(("no process of the tree is left", g.get("tree_left", 0) == 0 and kill is not None,
                   f"{g.get('tree_left', 0)} left"))
    roles = stacks["processes"] if stacks else {}
    if expect.stacks_of:
        missing = [r for r in expect.stacks_of if roles.get(r) != "captured"]
        checks.append((f"stacks captured of {', '.join(expect.stacks_of)}", bool(stacks) and not missing,
                       "no stacks" if not stacks else
                       ", ".join(f"{r} {st}" for r, st in sorted(roles.items())) or stacks.get("status", "none")))
    signalled = [t for t in result.touched if t.get("signal") == "SIGSTOP"]
    if signalled:
        held = set(g.get("signalled_stacks", ()))
        checks.append(("the stacks of the stopped process are in guard's dump",
                       all(t["pid"] in held for t in signalled),
                       "; ".join(f"{t['title']} (pid {t['pid']}) {'captured' if t['pid'] in held else 'not captured'}"
                                 for t in signalled)))
    if expect.diverging:
        wanted = [_fill(text, result) for text in expect.diverging]
        seen = stacks["diverging"] if stacks else []
        checks.append((f"guard's stack dump names {', '.join(wanted)} as the diverging rank",
                       bool(seen) and sorted(seen) == sorted(wanted), ", ".join(seen) or "no divergence"))
    return checks


EXIT_WORDS = {3: "it killed the server after a verdict", 6: "it killed the server after a hardware fault"}


def _cleared(expect, result) -> list[tuple[str, bool, str]]:
    """Each verdict that met fire / fire_any, cleared by the recorder within expect.clear_within_s of the
    fault's end — or, where requests were held across it, of the first token they got after it (M.resumed): a
    stall that does not clear after SIGCONT is a verdict stuck on, and one the engine itself holds after the
    signal (no token yet) is rightly still on."""
    within = expect.clear_within_s
    candidates = met_candidates(expect)
    fired = [v for v in dict.fromkeys(candidates) if v in result.detected]
    if not fired:
        return [(f"the verdict clears within {within:g} s once the fault ends and tokens move again", False,
                 "no such verdict fired")]
    resumed = getattr(result, "resumed_s", None) or 0.0
    out = []
    for verdict in fired:
        took = result.cleared.get(verdict)
        late = None if took is None else round(took - resumed, 2)
        said = "not cleared" if took is None else f"after {took:g} s"
        if took is not None and resumed > 0:
            said += f", {late:g} s after tokens moved again ({resumed:g} s after the fault)"
        out.append((f"{verdict} clears within {within:g} s once the fault ends and tokens move again",
                    late is not None and late <= within, said, _over(late, within)))
    return out


def _exit(within: float, result) -> list[tuple[str, bool, str]]:
    """The server's main process exited, process_exit fired within `within` of the injection, and it reported
    the exit status the drill read as the server's parent (when the drill started it)."""
    from servewatch.drill.measure import exit_words

    took = result.detected.get("process_exit")
    state = result.server_exit or {}
    status, reported = state.get("status"), state.get("reported")
    checks = [(f"process_exit within {within:g} s", took is not None and took <= within,
               "not fired" if took is None else f"after {took:g} s", _over(took, within))]
    if status is None and not state.get("read_as_parent", True):
        return checks       # a server the drill did not start: its exit status is its own parent's to read
    if status is None:
        checks.append(("the server's main process has exited", False,
                       "still running at the end of the step, or not the drill's child (its status is unknown)"))
        return checks
    real = exit_words(status)
    said = "no process_exit bundle to read" if reported is None else exit_words(**reported)
    checks.append(("process_exit reports the server's real exit status", said == real, f"reported {said}; real {real}"))
    return checks


def _cut(caught) -> tuple[str, bool, str]:
    """in_flight_cut: the fault cut at least one request and the load counted each cut one failed — no request
    counted ok with fewer tokens than asked (one whose last tokens were made before the fault may end whole)."""
    caught = caught or {"count": 0, "ok": 0, "whole": 0, "errors": {}}
    failed = sum(caught["errors"].values())
    short = caught["ok"] - caught.get("whole", caught["ok"])
    parts = [f"{n} {why}" for why, n in caught["errors"].items()]
    if caught.get("whole"):
        parts.append(f"{caught['whole']} whole (their tokens made before the fault)")
    if short:
        parts.append(f"{short} counted ok with fewer tokens than asked")
    observed = (f"{caught['count']} caught: " + ", ".join(parts)) if caught["count"] else "no request caught by the fault"
    return ("the requests the fault cut are counted failed, none a success", failed > 0 and short == 0, observed)


def _code(code) -> str:
    return "unknown (still running)" if code is None else str(code)


def policy_words(policy: dict) -> str:
    """What the action policy did in a fault, in words: the verdict acted on, when, and a kubelet on livez."""
    if not policy or policy.get("acted_s") is None and policy.get("livez_failed_s") is None:
        return "nothing acted"
    words = []
    if "livez_failed_s" in policy:
        failed = policy["livez_failed_s"]
        words.append("serve's livez never failed" if failed is None
                     else f"serve's livez failed on {policy['acted_on']} after {failed:g} s")
    elif policy.get("acted_s") is not None:
        words.append(f"guard and livez act on {policy['acted_on']} after {policy['acted_s']:g} s")
    if policy.get("kubelet_by_s") is not None:
        words.append(f"a kubelet on livez restarts by {policy['kubelet_by_s']:g} s")
    return "; ".join(words)


def _restart(expect, policy: dict) -> tuple:
    acted = policy.get("acted_s")
    failed = policy.get("livez_failed_s", acted)
    if expect.no_restart:
        return "no restart (guard's default and livez leave it be)", acted is None and failed is None, policy_words(policy)
    within = expect.restart_within_s
    late = None if acted is None or failed is None else _over(max(acted, failed), within)
    return (f"restarted: guard's default and livez act within {within:g} s",
            acted is not None and acted <= within and failed is not None and failed <= within, policy_words(policy),
            late)
