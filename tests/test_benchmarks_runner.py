"""benchmarks/run.py's judgement on synthetic results: a figure worse than the previous results by more
than its noise band fails the run, within the band passes; the band is the two runs' spread or the
figure's floor, whichever is larger. And deadline.within leaves no reference cycle behind (the cause of
serve's memory rise that benchmarks/serve_hostile.py found)."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from servewatch.transport.deadline import within

RUN_PY = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"


@pytest.fixture(scope="module")
def run():
    spec = importlib.util.spec_from_file_location("benchmarks_run", RUN_PY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up by name
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def figure(value, band, better="lower"):
    return {"value": value, "band": band, "better": better}


def test_spread_is_max_minus_min_over_the_mean(run):
    assert run.spread([100.0, 104.0]) == pytest.approx(4 / 102)
    assert run.spread([5.0]) == 0.0


def test_a_regression_beyond_the_band_fails_and_within_passes(run):
    previous = {"a.mb": figure(100.0, 0.05), "a.speedup": figure(60.0, 0.10, "higher")}
    # lower is better: 104 is 4 % worse (band 5 %): within; 106 is 6 % worse: regressed
    assert run.compare(previous, {"a.mb": figure(104.0, 0.05)})[0]["status"] == "within"
    verdict = run.compare(previous, {"a.mb": figure(106.0, 0.05)})[0]
    assert verdict["status"] == "regressed" and verdict["worse_by"] == pytest.approx(0.06)
    # higher is better: 55 is 8.3 % worse (band 10 %): within; 50 is 16.7 % worse: regressed
    assert run.compare(previous, {"a.speedup": figure(55.0, 0.10, "higher")})[0]["status"] == "within"
    assert run.compare(previous, {"a.speedup": figure(50.0, 0.10, "higher")})[0]["status"] == "regressed"
    # better beyond the band is no failure
    assert run.compare(previous, {"a.mb": figure(80.0, 0.05)})[0]["status"] == "improved"
    assert run.compare(previous, {"a.speedup": figure(70.0, 0.10, "higher")})[0]["status"] == "improved"


def test_the_band_is_the_larger_of_the_previous_and_the_current(run):
    previous = {"a.mb": figure(100.0, 0.05)}
    # 7 % worse: beyond the previous 5 % band, but this invocation measured 8 % of noise
    assert run.compare(previous, {"a.mb": figure(107.0, 0.08)})[0]["status"] == "within"
    assert run.compare({"a.mb": figure(100.0, 0.08)}, {"a.mb": figure(107.0, 0.05)})[0]["status"] == "within"
    assert run.compare(previous, {"a.mb": figure(109.0, 0.08)})[0]["status"] == "regressed"


def test_a_figure_new_or_no_longer_measured_is_not_judged(run):
    verdicts = run.compare({"gone.x": figure(1.0, 0.1)}, {"new.x": figure(2.0, 0.1)})
    assert verdicts == [{"figure": "new.x", "status": "new"}]


def synthetic(run, values):
    """A benchmark whose runs answer the given outputs in turn, with a 5 % floor on its one figure."""
    outputs = iter(values)
    return run.Benchmark("syn", (), {"mb": run.Figure("peak", "MB", "lower", 0.05, "synthetic",
                                                      baseline="alone"),
                                     "alone": run.Figure("alone", "MB", "lower", 0.05, "synthetic baseline")},
                         run=lambda: next(outputs))


def test_the_runner_writes_the_band_and_fails_on_a_regression(run, tmp_path):
    results = tmp_path / "results.json"
    argv = ["--results", str(results), "--previous", str(results), "--date", "2026-12-05"]
    # first invocation: nothing to compare with; two runs 100 and 110 MB: spread 9.5 % > the 5 % floor
    assert run.main(argv, [synthetic(run, [{"peak": 100, "alone": 50}, {"peak": 110, "alone": 50}])]) == 0
    written = json.loads(results.read_text())
    assert written["date"] == "2026-12-05" and written["runs"] == 2 and written["machine"]["cpus"]
    peak = written["figures"]["syn.mb"]
    assert peak["value"] == 105 and peak["runs"] == [100, 110]
    assert peak["spread"] == pytest.approx(10 / 105, abs=1e-4) and peak["band"] == peak["spread"]
    assert peak["baseline"] == {"figure": "syn.alone", "value": 50}
    assert written["figures"]["syn.alone"]["band"] == 0.05          # no spread: the floor

    # within the band (105 -> 112: 6.7 % worse, band 9.5 %): passes and rewrites the file
    assert run.main(argv, [synthetic(run, [{"peak": 112, "alone": 50}, {"peak": 112, "alone": 50}])]) == 0
    assert json.loads(results.read_text())["figures"]["syn.mb"]["value"] == 112

    # beyond it (112 -> 130.5: 16.5 % worse; both bands are the 5 % floor now): fails,
    # and the file keeps the last good figures
    before = results.read_text()
    assert run.main(argv, [synthetic(run, [{"peak": 130, "alone": 50}, {"peak": 131, "alone": 50}])]) == 1
    assert results.read_text() == before
    # --accept writes them anyway (a rise that is the price of a feature, said in the commit)
    assert run.main([*argv, "--accept"], [synthetic(run, [{"peak": 130, "alone": 50}] * 2)]) == 1
    assert json.loads(results.read_text())["figures"]["syn.mb"]["value"] == 130


def test_each_cpu_is_judged_against_its_own_results_and_the_others_are_kept(run, tmp_path, monkeypatch, capsys):
    """CI's machine is drawn from more than one kind of VM: a band measured on one CPU holds nothing on another.
    Each CPU's results are kept; a run compares with its own CPU's, and with another's (said so) only where its
    CPU has none."""
    results = tmp_path / "results.json"
    argv = ["--results", str(results), "--previous", str(results), "--date", "2026-12-08"]

    def on(cpu):
        monkeypatch.setattr(run, "machine", lambda: {"host": "vm", "cpu": cpu, "cpus": 2})

    def entry(cpu, mb):
        return {"date": "2026-12-01", "machine": {"host": "vm", "cpu": cpu, "cpus": 2}, "runs": 2,
                "figures": {"syn.mb": figure(mb, 0.05), "syn.alone": figure(50, 0.05)}}

    results.write_text(json.dumps({**entry("A", 100), "other_machines": {"B": entry("B", 200)}}))
    on("B")       # 205 MB: 2.5 % over B's 200, within its band (against A's 100 it would be 105 % worse)
    assert run.main(argv, [synthetic(run, [{"peak": 205, "alone": 50}] * 2)]) == 0
    assert "compared with the results of this CPU (B, 2026-12-01), kept beside the last written (A" in \
        capsys.readouterr().out
    written = json.loads(results.read_text())
    assert (written["machine"]["cpu"], written["figures"]["syn.mb"]["value"]) == ("B", 205)
    assert list(written["other_machines"]) == ["A"]                       # B's old entry replaced by the file's own
    assert written["other_machines"]["A"]["figures"]["syn.mb"]["value"] == 100
    assert written["other_machines"]["A"]["machine"]["cpu"] == "A"

    on("A")       # 130 MB against A's own 100: a regression, though within B's 205; nothing written
    before = results.read_text()
    assert run.main(argv, [synthetic(run, [{"peak": 130, "alone": 50}] * 2)]) == 1
    assert results.read_text() == before

    on("C")       # no results of its own: the file's own (B's), said
    assert run.main([*argv, "--no-write"], [synthetic(run, [{"peak": 205, "alone": 50}] * 2)]) == 0
    assert "no previous results from this CPU (C): compared with another machine's (vm, B, 2026-12-08)" in \
        capsys.readouterr().out


def test_the_committed_results_name_every_figure_of_the_runner(run):
    committed = json.loads((RUN_PY.parent / "results.json").read_text())
    expected = {f"{b.name}.{name}" for b in run.BENCHMARKS for name in b.figures}
    assert expected <= set(committed["figures"])
    for name in expected:
        f = committed["figures"][name]
        assert f["band"] >= f["floor"] and len(f["runs"]) >= 2, name


def test_an_absolute_figure_is_banded_in_its_unit(run, tmp_path):
    """A figure that may sit near or below zero (ms the proxy adds beyond nginx) has its spread, band and
    "worse by" in its unit: from 0.5 ms to 1.2 ms is 0.7 ms worse, within a 1 ms band and beyond a 0.5 ms one
    (relative to 0.5 it would be 140 % worse, and a figure at 0 could never regress)."""
    benchmark = run.Benchmark("abs", (), {"ms": run.Figure("ms", "ms", "lower", 0.5, "ms added", absolute=True)})
    [(name, summary)] = run.summarize(benchmark, [{"ms": -0.2}, {"ms": 1.2}]).items()
    assert (summary["spread"], summary["band"], summary["absolute"]) == (pytest.approx(1.4), pytest.approx(1.4), True)
    previous = {"abs.ms": {**figure(0.5, 1.0), "absolute": True}}
    verdict = run.compare(previous, {"abs.ms": {**figure(1.2, 0.5), "absolute": True}})[0]
    assert (verdict["status"], verdict["worse_by"]) == ("within", pytest.approx(0.7))
    previous["abs.ms"]["band"] = 0.5
    assert run.compare(previous, {"abs.ms": {**figure(1.2, 0.5), "absolute": True}})[0]["status"] == "regressed"
    assert run.compare({"z.ms": {**figure(0.0, 0.5), "absolute": True}},
                       {"z.ms": {**figure(0.6, 0.5), "absolute": True}})[0]["status"] == "regressed"
    assert run.compare(previous, {"abs.ms": {**figure(-0.1, 0.5), "absolute": True}})[0]["status"] == "improved"


def test_a_benchmark_whose_baseline_is_missing_is_skipped_and_its_figures_kept(run, tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"figures": {"gone.x": {**figure(1.0, 0.1), "runs": [1.0, 1.0]}}}))
    absent = run.Benchmark("gone", (), {"x": run.Figure("x", "x", "lower", 0.1, "needs a program")},
                           run=lambda: {"x": 9.0}, needs=("no-such-program-servewatch",))
    argv = ["--results", str(results), "--previous", str(results)]
    assert run.main(argv, [absent, synthetic(run, [{"peak": 100, "alone": 50}] * 2)]) == 0
    assert "gone: skipped, its baseline needs no-such-program-servewatch" in capsys.readouterr().out
    written = json.loads(results.read_text())["figures"]
    assert written["gone.x"]["value"] == 1.0 and written["syn.mb"]["value"] == 100


def test_nothing_measured_writes_nothing_and_says_so(run, tmp_path, capsys):
    """Every benchmark asked for skipped (its baseline's program missing): exit 1, the results file untouched, even
    with --accept (which once rewrote its machine and command over figures measured elsewhere)."""
    results = tmp_path / "results.json"
    text = json.dumps({"machine": {"host": "a", "cpu": "b"}, "figures": {"gone.x": {**figure(1.0, 0.1)}}})
    results.write_text(text)
    absent = run.Benchmark("gone", (), {"x": run.Figure("x", "x", "lower", 0.1, "needs a program")},
                           run=lambda: {"x": 9.0}, needs=("no-such-program-servewatch",))
    assert run.main(["gone", "--results", str(results), "--accept"], [absent]) == 1
    assert "nothing measured: every benchmark asked for was skipped" in capsys.readouterr().out
    assert results.read_text() == text


def test_within_leaves_no_reference_cycle():
    """Every scrape goes through within; a cycle there held each answer (a whole /metrics body) until
    serve's rare cyclic collection: +40 MB over 100 targets at a 0.5 s cadence."""
    async def answer():
        await asyncio.sleep(0)
        return b"x" * 1000

    async def slow():
        await asyncio.sleep(1)

    async def main():
        gc.collect()
        gc.disable()
        try:
            for _ in range(5):
                await within(answer(), 2.0)
            for _ in range(3):
                with pytest.raises(TimeoutError):
                    await within(slow(), 0.01)
            await asyncio.sleep(0.05)
            return gc.collect()
        finally:
            gc.enable()

    assert asyncio.run(main()) == 0
