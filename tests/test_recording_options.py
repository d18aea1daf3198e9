"""One set of recording defaults and one argument builder: watch, guard, diagnose, proxy and serve take
the shared recording flags from `servewatch.watch.options` (added by `servewatch.commands.recording`) and turn
them into `RecordingOptions` the same way; serve's config file is the base its command-line flags are laid over."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from servewatch.cli import build_parser
from servewatch.commands.recording import options_from_args, recording_from_args
from servewatch.commands.serve import config_from_args
from servewatch.detectors.config import DetectorConfig
from servewatch.errors import ServewatchError
from servewatch.serve import config as serve_config
from servewatch.watch.options import DEFAULT_HISTORY_S, RecordingOptions

FLAGS = ["--interval", "3s", "--set", "stall.floor_s=7"]


from servewatch.commands.guard import DEFAULTS as GUARD  # noqa: E402
from servewatch.commands.watch import DEFAULTS as WATCH  # noqa: E402


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_watch_and_guard_defaults_are_the_recording_defaults():
    assert options_from_args(parse("watch", "http://a:1"), WATCH) == RecordingOptions(url="http://a:1", probe=True)
    assert options_from_args(parse("watch", "http://a:1", "--no-probe"), WATCH).probe is False
    assert options_from_args(parse("guard", "http://a:1"), GUARD) == RecordingOptions(url="http://a:1", interval=0.5,
                                                                                       probe=True)
    assert options_from_args(parse("guard", "http://a:1", "--no-probe"), GUARD).probe is False
    assert config_from_args(parse("serve", "--target", "http://a:1")).recording == serve_config.FLEET_RECORDING


def test_every_command_reads_the_shared_flags_alike():
    stall = replace(DetectorConfig(), stall_floor_s=7.0)
    from servewatch.proxy.config import WATCH_FLAGS

    built = {
        "watch": options_from_args(parse("watch", "http://a:1", *FLAGS), WATCH),
        "guard": options_from_args(parse("guard", "http://a:1", *FLAGS), GUARD),
        "serve": config_from_args(parse("serve", "--target", "http://a:1", *FLAGS)).recording,
        "proxy": recording_from_args(parse("proxy", "--listen", "127.0.0.1:1", "--upstream", "http://a:1", *FLAGS),
                                     RecordingOptions(url="http://a:1"), WATCH_FLAGS),
    }
    for name, options in built.items():
        assert (options.interval, options.detectors) == (3.0, stall), name
    diagnose = parse("diagnose", "http://a:1", "--interval", "250ms")
    assert recording_from_args(diagnose, RecordingOptions(url="http://a:1"), ("interval",)).interval == 0.25


def test_serve_lays_the_command_line_over_its_config_file(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text("interval: 5s\nhistory: 20m\ntargets: [http://a:1]\n")
    config = config_from_args(parse("serve", "--config", str(path), "--out", str(tmp_path / "b")))
    assert (config.recording.interval, config.recording.history_s) == (5.0, 1200.0)   # the file's: not given here
    assert config.recording.out is None and config.out == str(tmp_path / "b")   # serve's --out: a directory per target
    config = config_from_args(parse("serve", "--config", str(path), "--interval", "1s"))
    assert (config.recording.interval, config.recording.history_s) == (1.0, 1200.0)
    assert serve_config.ServeConfig().recording.history_s == DEFAULT_HISTORY_S


@pytest.mark.parametrize("argv", [["watch", "http://a:1"], ["serve", "--target", "http://a:1"]])
def test_a_bad_detector_setting_is_one_error_naming_it(argv):
    args = parse(*argv, "--set", "stall.nonsense=1")
    with pytest.raises(ServewatchError, match="nonsense"):
        options_from_args(args, WATCH) if argv[0] == "watch" else config_from_args(args)
