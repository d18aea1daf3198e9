"""The mutation list by a rule, found from the code (issue 50).

A list chosen by hand missed where numbers are made: the proxy's time base is computed in proxy/server.py (the list
had proxy/exchange.py), the histogram summaries in engine/summary.py (not listed) — and a planted error in either
passed the whole suite. The rule, in scripts/mutation_modules.txt's words: start from the modules whose output an
operator reads (ROOTS below); follow every import within servewatch, at module level or inside a function, not into
the simulator and the lab (STAND_INS); keep the modules whose functions subtract, multiply or divide. Each module
found must be on a "mutate" line of scripts/mutation_modules.txt (scripts/mutation.sh's list) or on a "skip" line
with its reason; a skip the rule no longer finds is stale."""

from __future__ import annotations

import ast
import functools
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "scripts" / "mutation_modules.txt"

# Where an operator reads a figure. A folder stands for every module in it.
ROOTS = (
    "servewatch/sources/",              # the samples as the recorder reads them (scrapes, probes, processes, GPUs, logs)
    "servewatch/detectors/",            # verdicts: their times, onsets, evidence and details
    "servewatch/sinks/export/",         # watch's and serve's /metrics
    "servewatch/proxy/server.py",       # the proxy's records and its live request signals
    "servewatch/proxy/telemetry.py",    # the proxy's GenAI metrics and traces
    "servewatch/load/runner.py",        # load's records
    "servewatch/load/summary.py",       # load's summary
    "servewatch/load/render.py",        # load's printed tables
    "servewatch/load/requests_report.py",   # `servewatch requests` over the records
    "servewatch/engine/summary.py",     # a histogram's mean, quantiles and blindness (inspect, reports)
    "servewatch/drill/expect.py",       # a drill step's judgement
    "servewatch/drill/measure.py",      # a drill's figures
    "servewatch/drill/report.py",       # the drill's report
    "servewatch/bundle/summarize.py",   # a bundle's summary
    "servewatch/bundle/report_html.py", # a bundle's HTML report
    "servewatch/bundle/verify.py",      # verify's findings
    "servewatch/bundle/recompute.py",   # a bundle's verdicts recomputed
    "servewatch/derive/",               # advise's capacity figures, the rules' thresholds, dashboards
    "servewatch/doctor/",               # diagnose and postmortem
)
# stand-ins for an engine and the lab's harness: they make the numbers that are measured, not the measurement
STAND_INS = ("servewatch.sim", "servewatch.lab")
ARITHMETIC = (ast.Sub, ast.Mult, ast.Div, ast.FloorDiv)


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "servewatch").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The servewatch modules `name` imports anywhere in its text (relative imports resolved; `from a import b`
    counts a.b when b is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in modules}


def makes_numbers(path: Path) -> bool:
    """Whether a function of the module subtracts, multiplies or divides (module-level constants are not
    mutated: mutmut mutates function bodies)."""
    for fn in ast.walk(_tree(path)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ARITHMETIC):
                    return True
    return False


def rule_modules(roots=ROOTS) -> set[str]:
    """The modules the rule finds, as paths (servewatch/x/y.py)."""
    modules = _modules()
    todo = []
    for root in roots:
        dotted = root.rstrip("/").removesuffix(".py").replace("/", ".")
        todo += [m for m in modules if m == dotted or (root.endswith("/") and m.startswith(dotted + "."))]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name.startswith(STAND_INS):
            continue
        seen.add(name)
        todo += _imports(name, modules[name], modules)
    return {str(modules[m].relative_to(ROOT)) for m in seen if makes_numbers(modules[m])}


def read_list(text: str) -> tuple[list[str], dict[str, str], list[str]]:
    """(the modules to mutate, the skipped modules with their reasons, the lines not understood)."""
    mutate, skip, bad = [], {}, []
    for line in text.splitlines():
        words = line.split(None, 2)
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "mutate" and len(words) == 2:
            mutate.append(words[1])
        elif words[0] == "skip" and len(words) == 3 and len(words[2].split()) >= 3:
            skip[words[1]] = words[2]
        else:
            bad.append(line)
    return mutate, skip, bad


def problems(found: set[str], mutate: list[str], skip: dict[str, str]) -> list[str]:
    out = [f"{m}: makes a number on the path to a figure, and is neither mutated nor skipped with a reason"
           for m in sorted(found - set(mutate) - set(skip))]
    out += [f"{m}: skipped, but the rule does not find it (stale)" for m in sorted(set(skip) - found)]
    out += [f"{m}: both mutated and skipped" for m in sorted(set(mutate) & set(skip))]
    out += [f"{m}: listed twice" for m in sorted({m for m in mutate if mutate.count(m) > 1})]
    out += [f"{m}: no such module" for m in sorted(set(mutate) | set(skip)) if not (ROOT / m).is_file()]
    return out


def test_every_module_that_makes_a_figure_is_in_the_mutation_list():
    mutate, skip, bad = read_list(LIST.read_text(encoding="utf-8"))
    assert bad == [], "lines of scripts/mutation_modules.txt that are neither `mutate MODULE` nor `skip MODULE REASON`"
    assert problems(rule_modules(), mutate, skip) == []


def test_the_script_mutates_what_the_list_says():
    listed = subprocess.run(["bash", str(ROOT / "scripts" / "mutation.sh"), "--list"], capture_output=True, text=True,
                            timeout=30, check=True).stdout.split()
    mutate, _, _ = read_list(LIST.read_text(encoding="utf-8"))
    assert listed == mutate and len(listed) > 30


def test_the_rule_finds_where_the_figures_of_issue_50_are_made():
    found = rule_modules()
    # the time base of the proxy's TTFT and the histogram summaries: the two that a hand-made list missed
    assert {"servewatch/proxy/server.py", "servewatch/engine/summary.py", "servewatch/proxy/exchange.py",
            "servewatch/engine/histogram.py", "servewatch/load/client.py"} <= found
    # not the simulator, and not a module without arithmetic of its own (xid.py: table lookups)
    assert not any(m.startswith(("servewatch/sim/", "servewatch/lab/")) for m in found)
    assert "servewatch/detectors/xid.py" not in found and "servewatch/detectors/blindness.py" in found


def test_the_check_can_fail():
    mutate, skip, _ = read_list(LIST.read_text(encoding="utf-8"))
    found = rule_modules()
    base = problems(found, mutate, skip)           # (the tree's own, asserted empty above)
    without = [m for m in mutate if m not in ("servewatch/proxy/server.py", "servewatch/engine/summary.py")]
    assert sorted(set(problems(found, without, skip)) - set(base)) == [
        "servewatch/engine/summary.py: makes a number on the path to a figure, and is neither mutated nor skipped "
        "with a reason",
        "servewatch/proxy/server.py: makes a number on the path to a figure, and is neither mutated nor skipped "
        "with a reason"]
    stale = dict(skip, **{"servewatch/detectors/xid.py": "a lookup table only, no figure"})
    assert sorted(set(problems(found, mutate, stale)) - set(base)) == [
        "servewatch/detectors/xid.py: both mutated and skipped",
        "servewatch/detectors/xid.py: skipped, but the rule does not find it (stale)"]
    assert set(problems(found, mutate + ["servewatch/nowhere.py"], skip)) - set(base) == {
        "servewatch/nowhere.py: no such module"}
    # a skip needs its reason (three words at least); a line of another kind is not understood
    _, _, bad = read_list("skip servewatch/table.py widths\nmutate\nrun servewatch/clock.py\n# a comment\n")
    assert bad == ["skip servewatch/table.py widths", "mutate", "run servewatch/clock.py"]
    # a new import brings its module in: without the proxy's server among the roots, its arithmetic is not found
    assert "servewatch/proxy/server.py" not in rule_modules(tuple(r for r in ROOTS if r != "servewatch/proxy/server.py"))
