"""Each verdict's settings class, declared in its module, and DetectorConfig the view composed of them (issue 51):
the same keys and defaults a bundle stores, `--set` and TOML sections still reach them, and a settings class's
validate() refuses values that make no sense together."""

from __future__ import annotations

import dataclasses

import pytest

from servewatch.detectors import DetectorConfig, capacity, progress, registry, settings
from servewatch.detectors.config import SETTINGS, WindowSettings
from servewatch.detectors.evidence.stages import StartSettings
from servewatch.errors import ServewatchError


def test_the_config_is_the_settings_classes_composed():
    composed = [f.name for f in dataclasses.fields(DetectorConfig)]
    declared = [f.name for cls in SETTINGS for f in dataclasses.fields(cls)]
    assert composed == declared and len(composed) == len(set(composed)) == 53
    assert SETTINGS[:2] == (WindowSettings, StartSettings)
    assert SETTINGS[2:] == registry.settings_classes()
    config = DetectorConfig()
    for cls in SETTINGS:                   # each default written once, in its class
        assert dataclasses.asdict(cls.of(config)) == dataclasses.asdict(cls())
    assert DetectorConfig.owner("stall_floor_s") is progress.StallSettings
    assert DetectorConfig.owner("kv_high") is capacity.KvPressureSettings
    assert (config.stall_floor_s, config.kv_high, config.crash_loop_count, config.startup_max_s) == (2.0, 0.9, 3, 900.0)
    assert config.to_dict()["blind_kinds"] == ["itl", "ttft", "tpot"] and config.problems() == []


def test_set_and_toml_sections_reach_a_verdict_modules_setting(tmp_path):
    path = tmp_path / "detectors.toml"
    path.write_text("[stall]\nfloor_s = 5\n\n[kv]\nhigh = 0.95\n", encoding="utf-8")
    config = settings.build(["crash_loop.window_s=600", "stall.ceiling_s=90"], str(path))
    assert (config.stall_floor_s, config.stall_ceiling_s, config.kv_high, config.crash_loop_window_s) == (
        5.0, 90.0, 0.95, 600.0)
    assert progress.StallSettings.of(config) == progress.StallSettings(stall_floor_s=5.0, stall_ceiling_s=90.0)


@pytest.mark.parametrize("assignment, words", [
    ("stall.floor_s=61", "--set: stall_floor_s (61) is above stall_ceiling_s (60)"),
    ("kv.high=1.5", "--set: kv_high is a share from 0 to 1, not 1.5"),
    ("kv.clear=0.95", "--set: kv_clear (0.95) is above kv_high (0.9)"),
    ("probe_fail_count=0", "--set: probe_fail_count counts at least 1, not 0"),
    ("server_error_fraction=2", "--set: server_error_fraction is a share from 0 to 1, not 2"),
])
def test_a_settings_class_refuses_values_that_do_not_fit_together(assignment, words):
    with pytest.raises(ServewatchError) as caught:
        settings.build([assignment])
    assert str(caught.value) == words
    settings.build([assignment.split("=")[0] + "=" + {"stall.floor_s": "60", "kv.high": "1", "kv.clear": "0.9",
                                                       "probe_fail_count": "1",
                                                       "server_error_fraction": "1"}[assignment.split("=")[0]]])


def test_a_name_declared_twice_is_refused():
    from servewatch.detectors.config import _compose

    with pytest.raises(TypeError, match="setting stall_k is declared twice"):
        _compose((progress.StallSettings, progress.StallSettings))
