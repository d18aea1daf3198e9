"""A drill plan's workload may be a trace (`workload: {trace: FILE, speed: 2}`): the step sends the trace's rows
at their recorded times (divided by the speed) with their recorded output lengths, read from the plan's folder;
a trace beside a scenario, or one that is no trace, is one line at plan time."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from servewatch.cli import main
from servewatch.drill.plan import PlanError, load_plan
from servewatch.load.trace import read_trace

TRACE = Path(__file__).parent / "fixtures" / "traces" / "drill_burst.jsonl"
# The sender schedules each row at its offset / speed; what a record says it was scheduled at may differ from
# that by the clock's rounding only.
SCHEDULE_TOLERANCE_S = 0.002


def _plan(tmp_path: Path, workload: str, faults: str | None = None) -> Path:
    shutil.copy(TRACE, tmp_path / TRACE.name)
    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent(f"""
        name: trace drill
        target: {{engine: sim}}
        workload: {workload}
        defaults: {{warmup_s: 2, hold_s: 3, observe_s: 2}}
        faults:
    """) + textwrap.indent(textwrap.dedent(faults or """
          - name: the incident's traffic, nothing injected
            kind: quiet
            params: {traffic: true}
            expect:
              not_fire: [alive_health_ok_no_progress, not_serving]
    """), "  "))
    return plan


def test_a_trace_workload_reads_its_file_from_the_plans_folder_and_reports_only_its_name(tmp_path):
    plan = load_plan(_plan(tmp_path, f"{{trace: {TRACE.name}, speed: 2}}"))
    assert plan.workload["trace"] == str(tmp_path / TRACE.name)
    assert plan.to_json()["workload"] == {"trace": TRACE.name, "speed": 2}


@pytest.mark.parametrize("workload, words", [
    (f"{{trace: {TRACE.name}, rate: 4}}", "give trace or rate, not both"),
    ("{scenario: custom, rate: 2, speed: 2}", "speed: goes with trace: FILE"),
    ("{trace: missing.jsonl}", "trace: cannot read missing.jsonl"),
    ("{trace: plan.yaml}", "trace: plan.yaml: neither Mooncake JSONL"),
])
def test_a_bad_trace_workload_is_one_line_at_plan_time(tmp_path, workload, words):
    with pytest.raises(PlanError) as caught:
        load_plan(_plan(tmp_path, workload))
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.timeout(180)
def test_a_sim_drill_under_a_trace_sends_its_rows_at_their_times_and_lengths(tmp_path):
    speed = 2.0
    plan = _plan(tmp_path, f"{{trace: {TRACE.name}, speed: {speed:g}}}")
    out = tmp_path / "out"
    assert main(["drill", str(plan), "--out", str(out)]) == 0
    doc = json.loads((out / "drill.json").read_text())
    (step,) = doc["faults"]
    assert step["met"], step["checks"]
    assert json.dumps(doc).count(str(tmp_path)) == 0        # the trace by its name only
    records = [json.loads(line) for line in (out / "logs" / "workload-01.jsonl").read_text().splitlines()]
    rows = read_trace(str(TRACE)).rows
    # the step's workload runs longer than the trace lasts at this speed: every row is sent, once, in order
    assert len(records) == len(rows)
    records.sort(key=lambda r: r["scheduled"])
    assert [r["max_tokens"] for r in records] == [row.output_tokens for row in rows]
    first = records[0]["scheduled"]
    for record, row in zip(records, rows):
        assert abs((record["scheduled"] - first) - row.offset_s / speed) <= SCHEDULE_TOLERANCE_S
    assert all(r["http_status"] == 200 and r["output_tokens"] == r["max_tokens"] for r in records)
