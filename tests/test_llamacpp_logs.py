"""postmortem on the real llama-server's logs (issue 53): the start, requests, a SIGTERM idle, a SIGTERM with clients
streaming (it waits on them until a second signal), and a SIGKILL, captured from the lab's server
(tests/fixtures/llamacpp/capture_stop_and_kill.py; README.md), read through the dialect's log grammar
(servewatch/dialects/llamacpp.py, each pattern with its line of llama.cpp's source) and the log's own clock (minutes,
seconds, milliseconds and microseconds since the process started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servewatch.cli import main
from servewatch.dialects import llamacpp
from servewatch.doctor.log_files import read_lines
from servewatch.doctor.log_grammar import StampClock
from servewatch.doctor.log_record import read_record
from servewatch.doctor.postmortem import postmortem

REAL = Path(__file__).resolve().parent / "fixtures" / "llamacpp"


def _postmortem(name):
    return postmortem(read_record(read_lines([str(REAL / name)])))


@pytest.mark.parametrize("name, death, ready_s, death_stamp", [
    # "srv  llama_server: model loaded" at 0.00.388.126, the first stamped line at 0.00.003.095: ready 0.385 s in;
    # SIGTERM: "cleaning up before exit..." (server.cpp:465) at 0.15.196.315; the clients still streaming held it,
    # and a second SIGTERM forced the exit: "Received second interrupt, terminating immediately." (server.cpp:32)
    ("server_sigterm_under_streams.log", "forced_stop", 0.385031, "0.15.196.315"),
    ("server_sigterm_idle.log", "clean_shutdown", 0.030529, "0.01.766.200"),
    ("server_start_and_requests.log", "clean_shutdown", 0.015170, "0.08.785.683"),
    # SIGKILL leaves no line: the log ends on the request's last line (its slot released)
    ("server_killed.log", "no_last_words", 0.158991, "0.00.449.155"),
])
def test_each_real_log_reads_as_its_start_and_its_end_on_its_own_clock(name, death, ready_s, death_stamp):
    found = _postmortem(name)
    assert found.record.dialect == "llamacpp"
    assert [(s.name, s.numbers) for s in found.record.startup] == [("KV sizing", {"per_request": 2048}),
                                                                   ("ready", {})]
    assert found.record.ready_t == pytest.approx(ready_s, abs=1e-6)
    assert (found.death.classification, found.death.clock) == (death, death_stamp)


def test_the_generation_rate_lines_are_the_timeline():
    # four slots each logged "n_gen = 1238, tg = 412.3x t/s" (server-context.cpp:653) at 0.12.635
    found = _postmortem("server_sigterm_under_streams.log")
    rates = [p for p in found.record.stats if p.clock and p.clock.startswith("0.12.635")]
    assert len(rates) == 4 and all(412.3 <= p.gen_tps <= 412.35 for p in rates)


def test_the_log_clock_reads_minutes_seconds_milliseconds_and_microseconds_since_the_start():
    clock = StampClock()
    assert [clock.seconds(s) for s in ("0.00.003.095", "0.15.196.315", "12.01.000.001")] == \
        [0.0, pytest.approx(15.19322), pytest.approx(12 * 60 + 1.000001 - 0.003095)]
    assert clock.seconds("0.00.00") is None              # not that stamp, and no date either


def test_the_stop_that_waits_on_its_clients_needs_a_second_signal():
    """What the dialect says of the stop (llamacpp.SECOND_SIGNAL_LINE and the comment above it) is what the real
    server did: idle, exit 0 in milliseconds; with four clients streaming, no exit within 8 s of SIGTERM, then exit 1
    at once on a second SIGTERM, its last line the one server.cpp:32 writes."""
    facts = json.loads((REAL / "stop_and_kill.json").read_text())
    assert facts["sigterm_idle"]["returncode"] == 0 and facts["sigterm_idle"]["exit_after_first_sigterm_s"] < 1.0
    streams = facts["sigterm_under_streams"]
    assert streams["exit_after_first_sigterm_s"] is None and streams["returncode"] == 1
    assert streams["exit_after_second_sigterm_s"] < 1.0
    lines = (REAL / "server_sigterm_under_streams.log").read_text().splitlines()
    assert lines[-1] == llamacpp.SECOND_SIGNAL_LINE and llamacpp.SHUTDOWN_LINE in lines[-2]
    assert facts["killed"]["returncode"] == -9


def test_the_postmortem_command_says_the_kill_in_plain_words(capsys):
    code = main(["postmortem", str(REAL / "server_killed.log")])
    out = capsys.readouterr().out
    assert code == 0
    assert "Postmortem of a llamacpp log: 15 lines, 0.00.001.009 → 0.00.449.155" in out
    assert "Death: no last words" in out and "None" not in out


def test_a_stop_a_second_signal_forced_is_told_from_an_orderly_one_by_the_servers_own_line():
    """server.cpp:28-35: the first SIGTERM or SIGINT ends the loop and the process waits on its HTTP threads; a second
    one during that wait writes SECOND_SIGNAL_LINE (unprefixed, on stderr) and exits 1. That is a forced stop, whose
    exit status a supervisor counts as a failure; the same log without that line is an orderly stop."""
    forced = _postmortem("server_sigterm_under_streams.log")
    assert [e.kind for e in forced.record.events] == ["shutdown", "forced_stop"]
    assert forced.record.events[-1].fields == {"exit_code": llamacpp.SECOND_SIGNAL_EXIT} == {"exit_code": 1}
    assert forced.death.label == "stop forced by a second signal"
    assert "its stop began at 0.15.196.315" in forced.death.summary and "exit status 1" in forced.death.summary
    assert forced.death.exit == "the server exited with code 1 on a second stop signal"
    assert "Restart=on-failure" in forced.actions[0].action and len(forced.actions) == 2
    lines = (REAL / "server_sigterm_under_streams.log").read_text().splitlines()
    orderly = postmortem(read_record(lines[:-1]))        # the same stop, had the first signal ended it
    assert (orderly.death.classification, orderly.death.clock, orderly.death.exit) == \
        ("clean_shutdown", "0.15.196.315", None)


def test_the_postmortem_command_says_the_forced_stop(capsys):
    code = main(["postmortem", "--json", str(REAL / "server_sigterm_under_streams.log")])
    death = json.loads(capsys.readouterr().out)["death"]
    assert code == 0
    assert (death["classification"], death["label"], death["stamp"], death["exit"]) == \
        ("forced_stop", "stop forced by a second signal", "0.15.196.315",
         "the server exited with code 1 on a second stop signal")


@pytest.mark.parametrize("line", [
    # server-context.cpp:4061 (SRV_WRN): the batch is retried smaller, the server goes on
    "0.01.000.000 W srv  update_slots: failed to find free space in the KV cache, retrying with smaller batch size, "
    "i = 0, n_batch = 2048, ret = 1",
    # server-context.cpp:3096-3097 (SRV_ERR): the slots are aborted with an error, the server goes on
    "0.01.000.000 E srv  update_slots: decode() failed: some error",
])
def test_an_error_the_server_lives_through_is_no_death_by_out_of_memory(line):
    """An idle SIGTERM's real log with one such line before the stop: still an orderly stop, the line kept as an
    error event (it used to be read as an out-of-memory event: 'the engine ran out of device memory')."""
    lines = (REAL / "server_sigterm_idle.log").read_text().splitlines()
    found = postmortem(read_record([*lines[:-1], line, lines[-1]]))
    assert found.death.classification == "clean_shutdown"
    assert [e.kind for e in found.record.events] == ["error", "shutdown"]
