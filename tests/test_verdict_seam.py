"""One verdict, one module (issue 51): a toy verdict, tests/toy_verdict.py, added with one registration line and
no other edit, shows in every place a verdict shows: detection, the bundle schema's verdict enums, the reference
docs' verdict table and runbook section (scripts/readme_examples.py), the Prometheus rules and their alert names,
guard's --act-on default and accepted names, and serve's livez and readyz. Each check names the toy, so a seam that
reads a list of its own (not the registry) fails here; each is also checked without the toy registered, so none
passes by accident."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from servewatch import dialects
from servewatch.bundle import schemas
from servewatch.cli import build_parser
from servewatch.commands.guard import parse_act_on
from servewatch.derive import rules
from servewatch.detectors import DetectorConfig, registry, run_detectors
from servewatch.errors import ServewatchError
from servewatch.serve import probes
from servewatch.timeline.samples import HealthSample
from servewatch.timeline.window import Window
from tests import toy_verdict

ROOT = Path(__file__).resolve().parent.parent
NAME = toy_verdict.NAME
ALERT = "ServewatchToyTeapot"


def _readme_examples():
    spec = importlib.util.spec_from_file_location("readme_examples", ROOT / "scripts" / "readme_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLES = _readme_examples()


@pytest.fixture
def toy():
    registry.register_module(toy_verdict)          # the one line a new verdict adds (in VERDICT_MODULES)
    try:
        yield toy_verdict
    finally:
        registry.unregister_module(toy_verdict)


def teapot_window(seconds: float) -> Window:
    return Window(health=tuple(HealthSample(100.0 + i * 0.5, 418, 0.001) for i in range(int(seconds * 2) + 1)))


def schema_enums() -> list[list]:
    document = schemas.load("incident", registry.names(), dialects.identity_labels())
    return schemas.verdict_name_enums(document)


def verdicts_section(tmp_path) -> str:
    return EXAMPLES.example_verdicts(tmp_path)


def serve_rules() -> str:
    return rules.render_rule_file([rules.servewatch_group()], "# test")


def guard_default_act_on() -> list[str]:
    return build_parser().parse_args(["guard", "http://127.0.0.1:9"]).act_on.split(",")


def firing(seconds: float = 4.0) -> list:
    """The toy's firings over `seconds` of 418 answers (health_loss fires on them too: not the toy's business)."""
    return [v for v in run_detectors(teapot_window(seconds), DetectorConfig()) if v.name == NAME]


def test_the_toy_is_nowhere_unregistered(tmp_path):
    assert NAME not in registry.names()
    assert firing() == []
    assert all(NAME not in enum for enum in schema_enums())
    assert NAME not in verdicts_section(tmp_path)
    assert ALERT not in serve_rules() and NAME not in serve_rules()
    assert NAME not in guard_default_act_on()
    with pytest.raises(ServewatchError, match=NAME):
        parse_act_on(NAME)


def test_one_module_and_one_line_make_a_verdict_everywhere(toy, tmp_path):
    # detection: the registered detect function runs, with its own settings' default (3 s of 418)
    v, = firing()
    assert (v.name, v.onset, v.t, v.details) == (NAME, 100.0, 104.0, {"answers": 9})
    assert firing(2.5) == []
    assert toy_verdict.ToySettings.of(DetectorConfig()) == toy_verdict.ToySettings(3.0)

    # the bundle schema: every verdict-name enum of incident.schema.json, as verify validates against it
    enums = schema_enums()
    assert enums and all(enum[enum.index("crash_loop") + 1:].count(NAME) == 1 for enum in enums)

    # the reference docs' generator: the table row and the runbook section
    section = verdicts_section(tmp_path)
    assert f"| [`{NAME}`](#{NAME}) | incident | page | restart | the server says it is a teapot |" in section
    assert f"### {NAME}" in section
    assert "**Safe action.** Pour the tea." in section

    # the Prometheus rules and their alert names
    text = serve_rules()
    assert rules.servewatch_alert_name(NAME) == ALERT
    assert f"alert: {ALERT}" in text
    assert f'servewatch_verdict_active{{verdict="{NAME}"}} == 1' in text
    rule, = [r for r in rules.servewatch_group().rules if r.alert == ALERT]
    assert rule.labels == {"severity": "page", "action": "restart"}

    # guard: acts on it by default (its action class is restart) and accepts its name
    assert NAME in guard_default_act_on()
    assert parse_act_on(NAME) == (NAME,)

    # serve's livez and readyz: a restart-class firing fails both, named
    live = probes.livez([v])
    ready = probes.readyz([v], True, True, None)
    assert (live.status, ready.status) == (503, 503)
    assert live.reason.startswith(f"{NAME} (restart): /health answered 418")
    assert NAME in ready.reason


def test_the_registration_is_undone(toy):
    registry.unregister_module(toy)
    assert NAME not in registry.names() and NAME not in registry.by_action("restart")
    registry.register_module(toy)      # the fixture's teardown removes it again


def test_the_registry_lists_every_verdict_module_and_each_declares_its_own():
    """VERDICT_MODULES is the one list: every module of detectors/ that declares SPECS is on it, and each of its
    specs' detect function, runbook branch and settings class are the module's own."""
    declaring = {f"servewatch.detectors.{path.stem}" for path in (ROOT / "servewatch" / "detectors").glob("*.py")
                 if "\nSPECS = (" in path.read_text(encoding="utf-8")}
    listed = [module.__name__ for module in registry.VERDICT_MODULES]
    assert sorted(listed) == sorted(declaring) and len(listed) == 14
    assert [s.name for s in registry.specs()] == [s.name for m in registry.VERDICT_MODULES for s in m.SPECS]
    fields = set(DetectorConfig.__dataclass_fields__)
    for module in registry.VERDICT_MODULES:
        for spec in module.SPECS:
            assert spec.detect.__module__ == module.__name__, spec.name
            assert any(value is spec.runbook for value in vars(module).values()), spec.name
            assert registry.spec(spec.name) is spec
        for cls in module.SETTINGS:
            assert cls.__module__ == module.__name__
            assert set(cls.__dataclass_fields__) <= fields, cls.__name__
    assert not (ROOT / "servewatch" / "detectors" / "runbooks.py").exists()
