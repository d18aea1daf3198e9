"""What a server, a log, a config or a records file says reaches the terminal as it is: rich reads "[...]" in
a str as a style, and a closing tag that matches nothing ("[/x]") is a MarkupError — a traceback where the
words should be. Each printer that shows outside words is fed some. (postmortem and diagnose print their
outside words through the same plain console, but only words they allow-list: no bracket gets through.)"""

from __future__ import annotations

import json
from pathlib import Path

from servewatch.cli import main

HOSTILE = "[/x]"
STYLED = "[red]y"
FIXTURES = Path(__file__).parent / "fixtures"


def test_inspect_prints_label_values_as_they_are(tmp_path, capsys):
    path = tmp_path / "metrics.prom"
    path.write_text("# TYPE vllm:num_requests_running gauge\n"
                    f'vllm:num_requests_running{{model_name="{HOSTILE}{STYLED}",engine="0"}} 1\n')
    assert main(["inspect", str(path)]) == 0
    assert HOSTILE + STYLED in capsys.readouterr().out


def test_advise_prints_the_configs_names_as_they_are(tmp_path, capsys):
    from tests.test_advise import tiny_config, write_config

    directory = write_config(tmp_path / "m", {**tiny_config(), "architectures": [HOSTILE + STYLED]})
    assert main(["advise", "--model", str(directory), "--gpu", "H100"]) == 0
    assert HOSTILE + STYLED in capsys.readouterr().out


def test_the_live_watch_table_prints_the_servers_words_as_they_are():
    import io

    from rich.console import Console

    from servewatch.detectors.verdict import Verdict
    from servewatch.sinks.base import Fired
    from servewatch.timeline.window import Window
    from servewatch.watch.output import status_table

    verdict = Verdict(name="stall", t=10.0, onset=8.0, why=f"the engine said {HOSTILE} {STYLED}")
    out = io.StringIO()
    Console(file=out, width=200).print(status_table(Window(), [Fired(verdict, None)], ["stall"], 3.0))
    assert f"{HOSTILE} {STYLED}" in out.getvalue()
