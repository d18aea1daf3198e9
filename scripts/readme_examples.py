"""Regenerate the README's example blocks from real runs.

A region of README.md between `<!-- example: NAME -->` and `<!-- /example -->` is what the example NAME prints
when run now: the commands are run for real (servewatch through its own CLI, promtool when installed) in a
temporary directory. `python scripts/readme_examples.py` rewrites the regions; `--check` exits 1 and shows a
diff when the README differs. tests/test_readme.py runs the deterministic examples and compares.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
README = ROOT / "README.md"
REGION = re.compile(r"(<!-- example: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /example -->)", re.S)
FENCE = "```"


def _servewatch(*argv: str) -> tuple[int, str, str]:
    """Run `servewatch ARGV` in-process: (exit code, stdout, stderr)."""
    from servewatch.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def slo_yaml() -> str:
    """The README's own slo.yaml block: the example runs on exactly what the reader sees."""
    text = README.read_text(encoding="utf-8")
    match = re.search(r"```yaml\n# slo\.yaml\n(?P<body>.*?)```", text, re.S)
    if match is None:
        raise SystemExit("README.md: no ```yaml block starting with '# slo.yaml'")
    return match["body"]


def _rules(workdir: Path) -> Path:
    (workdir / "slo.yaml").write_text(slo_yaml(), encoding="utf-8")
    code, _, err = _servewatch("rules", "--slo", str(workdir / "slo.yaml"), "--out", str(workdir / "llm-rules.yml"))
    if code != 0:
        raise SystemExit(f"servewatch rules failed: {err.strip()}")
    return workdir / "llm-rules.yml"


def rule_counts(workdir: Path) -> tuple[int, int]:
    """(alerts, recording rules) in the rule file the README's slo.yaml gives."""
    import yaml

    doc = yaml.safe_load(_rules(workdir).read_text(encoding="utf-8"))
    rules = [r for g in doc["groups"] for r in g["rules"]]
    return sum("alert" in r for r in rules), sum("record" in r for r in rules)


def example_rules_counts(workdir: Path) -> str:
    alerts, records = rule_counts(workdir)
    return f"Two excerpts of `llm-rules.yml` ({alerts} alerts, {records} recording rules):\n"


def example_rules_check(workdir: Path) -> str | None:
    """`servewatch rules` then `promtool check rules`, and the one line a wrong threshold gets. None without
    promtool (its line is its own: never written for it)."""
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
    return "\n".join([FENCE,
                      "$ servewatch rules --slo slo.yaml --out llm-rules.yml && promtool check rules llm-rules.yml",
                      *(checked.stdout + checked.stderr).rstrip().splitlines(),
                      "$ sed 's/threshold: 1}/threshold: 1.2}/' slo.yaml > bad.yaml && "
                      "servewatch rules --slo bad.yaml --out x.yml",
                      err.strip(), FENCE]) + "\n"


REQUESTS_ARGV = ("requests", "requests.jsonl", "--by", "outcome", "--goodput", "ttft=2000,tpot=100")


def example_requests(workdir: Path) -> str:
    """`servewatch requests` over the records of an overload: `servewatch load`'s overload scenario for 30 s
    against the simulator (RTX 3060 profile, 16 slots, 20 s request timeout) in virtual time, so the same
    records every run."""
    from servewatch.clock import VirtualClock
    from servewatch.load.output import write_outputs
    from servewatch.load.scenarios import LoadConfig
    from servewatch.load.virtual import run_load_virtual
    from servewatch.sim import SimConfig, SimEngine

    engine = SimEngine(SimConfig(profile="rtx3060-7b", max_num_seqs=16), VirtualClock())
    run = run_load_virtual(LoadConfig(url="sim://in-process", scenario="overload", duration_s=30,
                                      metrics_interval_s=0, request_timeout_s=20), engine)
    assert not write_outputs(run, workdir)
    with _cwd(workdir):
        code, out, err = _servewatch(*REQUESTS_ARGV)
    assert code == 0, err
    return "\n".join([FENCE, "$ servewatch " + " ".join(REQUESTS_ARGV), *(line.rstrip() for line in out.rstrip().splitlines()),
                      FENCE]) + "\n"


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
        lines.append(f"| `{spec.name}` | {spec.action} | {evidence} | "
                     f"{'kills the tree' if spec.name in default_act_on() else '–'} | "
                     f"{'503' if spec.action == RESTART else '–'} | "
                     f"{'503' if spec.action in (RESTART, DRAIN) else '–'} | `{routes[spec.action]}` |")
    classes = "; ".join(f"**{name}**: {words}" for name, words in ACTION_CLASSES.items())
    return "\n".join(lines) + "\n\n" + f"The classes: {classes}.\n"


@contextlib.contextmanager
def _cwd(path: Path):
    import os

    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


# name -> (render(workdir) -> text or None when it cannot run here, deterministic)
EXAMPLES = {
    "rules-counts": (example_rules_counts, True),
    "rules-check": (example_rules_check, True),
    "requests": (example_requests, True),
    "action-policy": (example_action_policy, True),
}


def regions(text: str) -> dict[str, str]:
    return {m["name"]: m["body"] for m in REGION.finditer(text)}


def render(names=None) -> dict[str, str | None]:
    out = {}
    for name, (make, _) in EXAMPLES.items():
        if names is not None and name not in names:
            continue
        with tempfile.TemporaryDirectory(prefix=f"readme-{name}-") as tmp:
            out[name] = make(Path(tmp))
    return out


def rewrite(text: str, rendered: dict[str, str | None]) -> str:
    def put(m: re.Match) -> str:
        new = rendered.get(m["name"])
        return m.group(0) if new is None else m.group(1) + new + m.group(4)
    return REGION.sub(put, text)


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    unknown = set(regions(text)) - set(EXAMPLES)
    if unknown:
        print(f"README.md: unknown example(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    new = rewrite(text, render())
    if "--check" in argv:
        if new != text:
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), "README.md",
                                                       "README.md (regenerated)"))
            return 1
        return 0
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
