#!/usr/bin/env bash
# Mutation testing of the modules whose numbers an operator reads (issue 40), with mutmut 3.
#
#   scripts/mutation.sh [MODULE...]          every module given (default: the list below), one shard each
#   scripts/mutation.sh --changed [REF]      only the listed modules that the change touches, capped at 5 minutes
#   scripts/mutation.sh --list               the list (scripts/mutation_modules.txt's "mutate" lines), one a line
#   options: --floor PCT (default 90: exit 1 when a module's kill rate is below it)
#            --budget S  (seconds for the whole run; default none, 300 with --changed)
#            --report FILE (also write the markdown report there)
#            --report-only (the report of the shards' last results: nothing is run)
#
# One shard per module under mutants/<module>/ (gitignored): a pyproject.toml whose [tool.mutmut] mutates only
# that module and runs only the test files that import it (found by grep), plus links to servewatch/ and tests/.
# mutmut copies the package into the shard's mutants/ and never writes the sources; results are kept per
# mutant, so a rerun tests only the functions that changed (incremental). The shards run one after another,
# one test process at a time (--max-children 1) and under nice: the machine is shared.
# Kill rate = (killed + timed out) / (all mutants - the equivalent ones in tests/mutation_equivalent.txt).
set -u -o pipefail
{   # the whole script is read before it runs: an edit while it runs cannot change it midway

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# The list, by a rule (issue 50): scripts/mutation_modules.txt, whose "mutate" lines are mutated here and whose
# "skip" lines say why a module the rule finds is left out (tests/test_mutation_scope.py holds the two to the code).
mapfile -t DEFAULT_MODULES < <(awk '$1 == "mutate" { print $2 }' "$ROOT/scripts/mutation_modules.txt")

# Functions out of the report's scope, by module (a regex on mutmut's mutant names: x_FUNC__ for a function,
# xǁCLASSǁ for a class's methods): the plumbing that is no figure an operator reads. Their mutants are made and
# listed as "out of scope" (none is tested: no test file of the shard reaches them), not counted in the kill rate.
declare -A OUT_OF_SCOPE=(
  # the recording half of the drill (subprocesses, threads, HTTP polling, files); its figures are derived below
  [servewatch/drill/measure.py]='xǁ(Prober|Watcher|Workload)ǁ|\.x_(save_records|files_holding|log_shows|log_size)__'
)

# The other way round, for a module most of whose functions are plumbing that every test of it reaches: the functions
# in scope (fnmatch patterns of mutant names, mutmut run's own filter). Only their mutants are run; the others are
# "out of scope" in the report.
declare -A IN_SCOPE=(
  # the proxy's recording path: the time base (the request sent upstream, each read's time, the connection's),
  # the record made at the end and the live sample, and the compiled pump's reads counted (drained, replayed);
  # not its HTTP handling (the request head's parsing, error answers, deadlines, backpressure, the pool), which
  # the proxy's tests read byte for byte
  [servewatch/proxy/server.py]='servewatch.proxy.server.xǁProxyǁ_record__mutmut_* servewatch.proxy.server.xǁProxyǁfinished__mutmut_*
    servewatch.proxy.server.xǁProxyǁrecord_ended__mutmut_* servewatch.proxy.server.xǁProxyǁsnapshot__mutmut_*
    servewatch.proxy.server.xǁProxyǁacquire__mutmut_* servewatch.proxy.server.xǁProxyǁ_connect__mutmut_*
    servewatch.proxy.server.xǁUpstreamǁattach__mutmut_* servewatch.proxy.server.xǁUpstreamǁdata_received__mutmut_*
    servewatch.proxy.server.xǁProxyǁ_pumps_stopped__mutmut_* servewatch.proxy.server.xǁProxyǁdrain_all__mutmut_*
    servewatch.proxy.server.xǁUpstreamǁunpump__mutmut_* servewatch.proxy.server.xǁUpstreamǁdrain__mutmut_*
    servewatch.proxy.server.xǁUpstreamǁ_replay__mutmut_*'
)

# The test files of a module, where the grep below would bring in tests that run whole scenarios (a simulator and
# a recorder in subprocesses, minutes a test): each mutant would rerun them. Named here instead.
# The detectors' fast tests (a Timeline of samples into run_detectors: 4 s together), shared by the detectors' shards;
# each shard adds its own value tests. Left out: the watch/serve/drill tests that run the recorder or a simulator.
DETECTOR_TESTS='tests/test_detectors_liveness.py tests/test_detectors_progress.py tests/test_detectors_ranks.py
  tests/test_detectors_conditions.py tests/test_detectors_crash_loop.py tests/test_detectors_tracks.py
  tests/test_detectors_shutdown.py tests/test_detectors_startup.py tests/test_detectors_capacity.py
  tests/test_detectors_outcomes.py tests/test_detectors_overload_log.py tests/test_action_policy.py'
declare -A TESTS=(
  # verdict.py is imported by nearly every test file; these read its values (test_probe.py, which imports it too,
  # runs the recorder against the simulator: 70 s)
  [servewatch/detectors/verdict.py]='tests/test_values_verdict.py tests/test_action_policy.py tests/test_bundle.py
    tests/test_ended_by.py tests/test_seams.py tests/test_sink_registry.py tests/test_source_kinds.py tests/test_words.py'
  # test_drill.py runs drills end to end against the simulator
  [servewatch/drill/measure.py]='tests/test_values_measure.py tests/test_action_policy.py'
  # test_proxy.py runs the proxy between sockets and a simulated upstream: its requests_no_token scenarios (8 s) and
  # the OTLP export are left out (13 s of tests for each mutant of finish() otherwise)
  [servewatch/proxy/exchange.py]='tests/test_values_exchange.py tests/test_requests_readback.py tests/test_proxy.py
    --deselect=tests/test_proxy.py::test_requests_no_token_is_silent_through_an_overload_served_in_turn
    --deselect=tests/test_proxy.py::test_requests_no_token_is_silent_through_long_requests_that_are_not_streamed
    --deselect=tests/test_proxy.py::test_requests_no_token_is_silent_through_a_long_prefill
    --deselect=tests/test_proxy.py::test_requests_no_token_fires_on_a_stalled_engine_within_its_threshold
    --deselect=tests/test_proxy.py::test_traces_export_over_otlp_keeping_errors'
  # test_rules_prometheus.py loads the rules into a real Prometheus: 17 s for each mutant of the SLO parser
  [servewatch/derive/slo.py]='tests/test_values_slo.py tests/test_rules.py'
  # test_probe.py runs the recorder against the simulator in virtual time (10 s a test, 60 s for a mutant of poll())
  [servewatch/sources/probe.py]='tests/test_values_probe.py tests/test_probe_http.py'
  [servewatch/drill/expect.py]='tests/test_values_expect.py tests/test_action_policy.py tests/test_ci_retry_policy.py'
  # with llama.cpp's hand-built loop-hang windows (issue 53: the silent /metrics, the prompt still due, the slots;
  # 1 s together): not its simulator, watch and demo runs (20 s)
  [servewatch/detectors/not_serving.py]="tests/test_values_not_serving.py $DETECTOR_TESTS
    tests/test_llamacpp.py::test_health_ok_while_metrics_time_out_and_probes_miss_is_not_serving_naming_the_endpoint
    tests/test_llamacpp.py::test_a_scrape_still_waiting_when_the_probes_miss_is_silence_too
    tests/test_llamacpp.py::test_a_scrape_merely_late_is_no_silence
    tests/test_llamacpp.py::test_the_hang_under_load_is_named_though_the_last_scrape_before_it_showed_requests_running
    tests/test_llamacpp.py::test_a_long_prompt_batch_logged_meanwhile_is_not_a_hang
    tests/test_llamacpp.py::test_a_prompt_under_way_is_waited_for_twice_the_rest_of_it_at_its_logged_rate
    tests/test_llamacpp.py::test_an_engine_whose_metrics_do_not_wait_on_its_loop_keeps_the_old_rule
    tests/test_llamacpp.py::test_the_real_hang_endpoints_make_the_verdict"
  [servewatch/detectors/liveness.py]="tests/test_values_liveness.py $DETECTOR_TESTS"
  [servewatch/detectors/progress.py]="tests/test_values_progress.py $DETECTOR_TESTS"
  [servewatch/detectors/ranks.py]="tests/test_values_ranks.py $DETECTOR_TESTS tests/test_ranks.py"
  [servewatch/detectors/restart.py]="tests/test_values_restart.py $DETECTOR_TESTS"
  [servewatch/detectors/crash_loop.py]="tests/test_values_restart.py $DETECTOR_TESTS"
  [servewatch/detectors/no_token.py]="tests/test_values_no_token.py $DETECTOR_TESTS"
  [servewatch/detectors/startup.py]="tests/test_values_startup.py $DETECTOR_TESTS"
  [servewatch/detectors/blindness.py]="tests/test_values_blindness.py $DETECTOR_TESTS"
  [servewatch/detectors/series.py]="tests/test_values_series.py $DETECTOR_TESTS"
  [servewatch/detectors/probes.py]="tests/test_values_series.py $DETECTOR_TESTS"
  # test_guard_identity.py runs guard and watch as subprocesses (1 s a test)
  [servewatch/actions/identity.py]='tests/test_values_identity.py tests/test_identity.py'
  # the grep finds 17 files that write and verify whole bundles (the recorder, the simulator, watch)
  # (and a registered source kind's bundle, verified against the schema with its fields added: 2 s)
  [servewatch/bundle/verify.py]='tests/test_values_verify.py tests/test_verify.py tests/test_bundle.py
    tests/test_seam_counts.py'
  [servewatch/bundle/recompute.py]='tests/test_values_verify.py tests/test_verify.py tests/test_bundle.py'
  # the histograms' read plans (compile_plan, apply_compiled) are reached through a dialect's scrape layout: the
  # grep's files and the layout's tests (3 s)
  [servewatch/engine/histogram.py]='tests/test_detectors_tracks.py tests/test_histogram.py tests/test_values_blind_fraction.py
    tests/test_values_histogram.py tests/test_exposition_layout.py'
  [servewatch/transport/deadline.py]='tests/test_values_deadline.py tests/test_deadline.py'
  [servewatch/transport/contract.py]='tests/test_values_transport_contract.py tests/test_transport_contract.py tests/test_sources_http.py'
  # guard's exit statuses and actions are decided here (supervisor.py carries them out: processes and signals)
  [servewatch/actions/policy.py]='tests/test_values_policy.py tests/test_guard_policy.py'
  # overload, kv_pressure, preemption: the detectors' tests reach it through run_detectors (the grep finds one file)
  [servewatch/detectors/capacity.py]="tests/test_values_capacity.py $DETECTOR_TESTS"
  # server_errors, client_errors, requests_aborted: as capacity.py
  [servewatch/detectors/outcomes.py]="tests/test_values_outcomes.py $DETECTOR_TESTS"
  # the Xid table's lookups (the grep adds test_detectors_gpu.py, whose guard and gpu-check runs take 10 s)
  [servewatch/detectors/xid.py]='tests/test_values_xid.py'
  # collective_hang: the two files the grep finds, named
  [servewatch/detectors/collective.py]='tests/test_values_collective.py tests/test_detectors_collective.py'
  # the prefill/decode verdicts (issue 52): hand-built pair windows and the real NIXL fixtures (test_pd_deployment.py
  # runs simulator pairs through watch and serve: 30 s a mutant)
  [servewatch/detectors/pd.py]='tests/test_pd_mutants.py tests/test_pd_verdicts.py'
  # llama.cpp's /slots read (issue 53): its values, the recorder's source (not watch on the simulator: 10 s a mutant);
  # the dialect's tests read the real captures through it
  [servewatch/sources/slots.py]='tests/test_slots_mutants.py tests/test_slots_recorded.py tests/test_llamacpp.py
    --deselect=tests/test_slots_recorded.py::test_watch_records_the_slot_picture_into_the_timeline_and_the_bundle'
  # gpu_fault, gpu_throttled, the GPU of each rank (test_detectors_gpu.py and test_gpu_check.py build and run the
  # NVML stand-in and gpu-check: 10 s)
  [servewatch/detectors/gpu.py]="tests/test_values_gpu.py $DETECTOR_TESTS"
  # the specs, precedence and action policy (the grep finds the files that run watch, serve and drills)
  [servewatch/detectors/registry.py]="tests/test_values_registry.py $DETECTOR_TESTS"
  # the evidence several verdicts read, moved below them (issue 51): the value tests of the verdicts that read it
  [servewatch/detectors/evidence/engine_signs.py]="tests/test_values_liveness.py tests/test_values_progress.py
    tests/test_values_not_serving.py tests/test_values_outcomes.py $DETECTOR_TESTS"
  [servewatch/detectors/evidence/crash_loop.py]="tests/test_values_restart.py $DETECTOR_TESTS"
  [servewatch/detectors/evidence/stages.py]="tests/test_values_startup.py $DETECTOR_TESTS"
  [servewatch/detectors/evidence/gpus.py]="tests/test_values_gpu.py tests/test_values_progress.py tests/test_values_ranks.py
    $DETECTOR_TESTS"
  # the histogram summaries (issue 50): their values, at the blind fraction's boundary (the grep adds the
  # conformance of a real server, which needs one)
  [servewatch/engine/summary.py]='tests/test_values_engine_summary.py tests/test_values_blind_fraction.py
    tests/test_values_blindness.py tests/test_detectors_tracks.py'
  # one request to one record (issue 50): the load client's time base and error classes; finish_record is the
  # proxy's too (the grep finds none: the runner's tests reach it through the simulator)
  [servewatch/load/client.py]='tests/test_values_load_client.py tests/test_values_exchange.py tests/test_values_proxy_server.py'
  # the series a bundle's report charts (issue 50; the grep finds the report's tests, which write whole bundles)
  [servewatch/bundle/series.py]='tests/test_values_bundle_series.py'
  # every sample's time (issue 50; 40 test files import the clock: these read its values)
  [servewatch/clock.py]='tests/test_values_clock.py tests/test_clock_steps.py'
  # the chunk counter of load and the proxy (issue 50; the grep finds one file)
  [servewatch/transport/stream.py]='tests/test_values_stream.py tests/test_load_events.py tests/test_values_load_client.py
    tests/test_values_exchange.py'
  # what load's server view and diagnose report of a stretch of scrapes (issue 50; no test file imports it)
  [servewatch/engine/served.py]='tests/test_values_engine_served.py'
  # run_detectors, the lookback window, precedence and the evidence window (issue 50; 59 test files import it)
  [servewatch/detectors/__init__.py]="tests/test_values_detectors_window.py tests/test_values_registry.py tests/test_bundle.py $DETECTOR_TESTS"
  # a process's start, which identity and restarts rest on (issue 50)
  [servewatch/proctime.py]='tests/test_values_proctime.py tests/test_proctime.py tests/test_sources_process.py'
  # a request's record, written and read back (issue 50; the grep brings in the simulator's and the drill's runs)
  [servewatch/load/records.py]='tests/test_values_records.py tests/test_requests_readback.py tests/test_values_load_client.py
    tests/test_values_summary.py tests/test_values_exchange.py tests/test_load_summary.py'
  # `servewatch requests` over the records of load and the proxy (issue 50)
  [servewatch/load/readback.py]='tests/test_values_readback.py tests/test_requests_readback.py'
  # `servewatch requests --html` (issue 50)
  [servewatch/load/requests_report.py]='tests/test_values_requests_report.py tests/test_requests_readback.py'
  # the process tree's samples: CPU %, states, members (issue 50; test_serve_stale.py runs serve)
  # durations in seconds and parsed log numbers in words (the grep finds the files that run load, drills, the proxy)
  [servewatch/words.py]='tests/test_values_words.py tests/test_words.py'
  # the culprit's multiplication of an allocation failure: no test imports it but postmortem's (issue 50)
  [servewatch/doctor/arithmetic.py]='tests/test_values_arithmetic.py tests/test_postmortem.py'
  # the rules as written, compared with the kept files (the grep brings in a real Prometheus: 27 s a mutant)
  [servewatch/derive/rules.py]='tests/test_values_rules.py tests/test_rules.py tests/test_verdict_seam.py tests/test_gpu_fault_action.py
    tests/test_rules_promtool.py::test_the_kept_rule_tests_are_what_the_generator_writes_today'
  # diagnose's window (the grep brings in test_layers.py; one test waits out a 5 s connection grace)
  [servewatch/doctor/diagnose.py]='tests/test_values_diagnose.py tests/test_diagnose.py
    --deselect=tests/test_diagnose.py::test_a_refused_connection_is_said_after_the_grace_not_the_whole_window'
  [servewatch/sources/process.py]='tests/test_process_mutants.py tests/test_values_process_source.py tests/test_sources_process.py
    tests/test_proctime.py'
  # the sources on the path to a figure (issue 50 item 8): their value tests and the fast tests of each; left out,
  # the files that run watch, guard, serve or the simulator around them (8-10 s a test: test_collective_source.py,
  # test_serve_dcgm.py, test_sim_pd.py, test_watch_sim_quiet.py)
  [servewatch/sources/flight_recorder.py]='tests/test_values_flight_recorder.py tests/test_flight_recorder.py
    tests/test_detectors_collective.py'
  [servewatch/sources/dcgm.py]='tests/test_values_dcgm.py tests/test_dcgm_source.py tests/test_gpu_attribution.py'
  [servewatch/sources/gpu.py]='tests/test_values_gpu_source.py tests/test_gpu_ranks.py tests/test_dcgm_source.py'
  [servewatch/sources/logs.py]="tests/test_values_logs.py tests/test_sources_logs.py $DETECTOR_TESTS"
  [servewatch/sources/http.py]='tests/test_values_sources_http.py tests/test_sources_http.py tests/test_dcgm_source.py'
  # the dialects' reads of a scrape and a log line: their own tests, the pair series, the log tail and the rules
  # (the grep finds the files that run the simulator, advise, bundles and the dashboard: minutes a mutant)
  [servewatch/dialects/vllm.py]='tests/test_values_dialect_vllm.py tests/test_dialects.py tests/test_pd_series.py
    tests/test_sources_logs.py tests/test_values_logs.py tests/test_rules.py'
  [servewatch/dialects/sglang.py]='tests/test_values_dialect_sglang.py tests/test_dialects.py tests/test_pd_series.py
    tests/test_sources_logs.py tests/test_values_logs.py tests/test_rules.py'
  # the proxy's recording path (issue 50; IN_SCOPE above): the TTFT from an upstream with a known delay, the
  # proxy's tests as exchange.py runs them, the live sample's values
  [servewatch/proxy/server.py]='tests/test_proxy_ttft.py tests/test_values_proxy_server.py tests/test_proxy.py
    tests/test_proxy_pump.py
    --deselect=tests/test_proxy.py::test_requests_no_token_is_silent_through_an_overload_served_in_turn
    --deselect=tests/test_proxy.py::test_requests_no_token_is_silent_through_long_requests_that_are_not_streamed
    --deselect=tests/test_proxy.py::test_requests_no_token_is_silent_through_a_long_prefill
    --deselect=tests/test_proxy.py::test_requests_no_token_fires_on_a_stalled_engine_within_its_threshold
    --deselect=tests/test_proxy.py::test_traces_export_over_otlp_keeping_errors'
  # the proxy's histograms, live state and trace sampling (issue 50; the grep finds the proxy's socket tests)
  [servewatch/proxy/telemetry.py]='tests/test_values_telemetry.py tests/test_proxy_recordlog.py'
  # the rank series (issue 50; the grep finds serve's runs)
  [servewatch/sinks/export/rank_series.py]='tests/test_values_rank_series.py'
  # serve's /metrics (issue 50; the grep finds 11 files that run serve, guard and the drills)
  [servewatch/sinks/export/exporter.py]='tests/test_values_exporter.py tests/test_sink_registry.py'
  # a bundle read back for its reports (issue 50; the grep finds the recorder's and the drills' runs)
  [servewatch/bundle/incident.py]='tests/test_values_incident.py'
  [servewatch/bundle/summarize.py]='tests/test_values_summarize.py tests/test_gpu_panel.py'
  [servewatch/bundle/gpu_panel.py]='tests/test_values_gpu_panel.py tests/test_gpu_panel.py'
  # the drill's report (test_drill.py runs drills against the simulator)
  [servewatch/drill/report.py]='tests/test_values_drill_report.py tests/test_recorder_starved.py'
  # load's server view (test_scrape.py serves each failure kind over sockets)
  [servewatch/load/server_view.py]='tests/test_values_server_view.py tests/test_load_summary.py'
  # load's presets, configuration and arrivals (the grep brings in the demo's runs)
  [servewatch/load/scenarios.py]='tests/test_values_scenarios.py'
  [servewatch/load/render.py]='tests/test_values_render.py tests/test_table.py'
  # the virtual-time driver (test_load_sim.py and test_demo.py run minutes of simulated load: named instead)
  [servewatch/load/virtual.py]='tests/test_values_virtual.py'
)

FLOOR=90
BUDGET=""
CHANGED=""
CHANGED_REF=""
REPORT=""
REPORT_ONLY=""
MODULES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --changed) CHANGED=1
               if [ $# -gt 1 ] && [ "${2#-}" = "$2" ] && [ "${2%.py}" = "$2" ]; then CHANGED_REF=$2; shift; fi ;;
    --floor) FLOOR=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    --report) REPORT=$2; shift ;;
    --report-only) REPORT_ONLY=1 ;;
    --list) printf '%s\n' "${DEFAULT_MODULES[@]}"; exit 0 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "mutation.sh: unknown option $1" >&2; exit 2 ;;
    *) MODULES+=("$1") ;;
  esac
  shift
done

PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || PY=$(command -v python3)
if ! "$PY" -c 'import mutmut, sys; sys.exit(0 if mutmut.__version__.startswith("3.") else 1)' 2>/dev/null; then
  echo "mutation.sh: installing mutmut 3" >&2
  "$PY" -m pip install -q 'mutmut>=3.8,<4' || { echo "mutation.sh: could not install mutmut" >&2; exit 2; }
fi

if [ -n "$CHANGED" ]; then
  [ -n "$BUDGET" ] || BUDGET=300
  if [ -z "$CHANGED_REF" ]; then
    # A branch: what it adds to main. Main itself (a clean clone's CI, where origin/main is HEAD and that range is
    # empty): the last commit.
    if git rev-parse -q --verify origin/main >/dev/null && [ "$(git rev-list --count origin/main...HEAD)" != 0 ]; then
      CHANGED_REF="origin/main...HEAD"
    else
      CHANGED_REF="HEAD~1"
    fi
  fi
  touched=$( { git diff --name-only "$CHANGED_REF" 2>/dev/null; git diff --name-only HEAD 2>/dev/null; } | sort -u)
  for m in "${DEFAULT_MODULES[@]}"; do
    if printf '%s\n' "$touched" | grep -qx "$m"; then MODULES+=("$m"); fi
  done
  if [ ${#MODULES[@]} -eq 0 ]; then
    echo "mutation.sh: the change ($CHANGED_REF) touches none of the mutation-tested modules"
    exit 0
  fi
fi
[ ${#MODULES[@]} -gt 0 ] || MODULES=("${DEFAULT_MODULES[@]}")

# The test files that exercise a module: every top-level test file that imports it (the real-engine
# conformance and lab folders are not part of the fast suite and are left out).
tests_for() {
  local mod=${1%.py}; mod=${mod//\//.}
  local pkg=${mod%.*} leaf=${mod##*.}
  grep -lE "${mod//./\\.}\b|from ${pkg//./\\.} import ([^#]*[ ,(])?${leaf}\b" tests/test_*.py 2>/dev/null | sort
}

make_shard() {   # $1 module, $2 shard dir, $3... test files
  local module=$1 shard=$2; shift 2
  mkdir -p "$shard"
  ln -sfn "$ROOT/servewatch" "$shard/servewatch"
  ln -sfn "$ROOT/tests" "$shard/tests"
  # the other top-level files the tests read (README.md, deploy/, benchmarks/, ...): linked, then copied by also_copy
  local extra=()
  for e in $(git -C "$ROOT" ls-files | cut -d/ -f1 | sort -u); do
    case "$e" in servewatch|tests|pyproject.toml|.gitignore) continue ;; esac
    [ -e "$ROOT/$e" ] || continue
    ln -sfn "$ROOT/$e" "$shard/$e"; extra+=("$e")
  done
  printf '%s\n' "${OUT_OF_SCOPE[$module]:-}" > "$shard/out_of_scope"
  printf '%s\n' "${IN_SCOPE[$module]:-}" | tr -s ' \n' '\n' | grep -v '^$' > "$shard/in_scope"
  # mutmut copies the package's other files (schemas, plans) once and never again: bring them up to date
  if [ -d "$shard/mutants/servewatch" ]; then
    (cd "$ROOT" && find servewatch -type f ! -name '*.py' ! -name '*.pyc' -print0 |
       xargs -0 -r cp -p --parents -t "$shard/mutants")
  fi
  "$PY" - "$ROOT/pyproject.toml" "$shard/pyproject.toml" "$module" "${extra[*]}" "$@" <<'EOF'
import json, re, sys
src, dst, module, extra, tests = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5:]
text = open(src, encoding="utf-8").read()
# the project's own [tool.mutmut] section is replaced by the shard's (the pytest settings are kept)
text = re.sub(r"(?ms)^\[tool\.mutmut\]\n.*?(?=^\[|\Z)", "", text)
q = lambda xs: "[" + ", ".join(json.dumps(x) for x in xs) + "]"
text += f"""
[tool.mutmut]
source_paths = ["servewatch"]
only_mutate = [{json.dumps(module)}]
also_copy = {q(extra)}
pytest_add_cli_args_test_selection = {q(tests)}
pytest_add_cli_args = ["-p", "no:xdist", "-p", "no:cacheprovider", "-p", "no:rerunfailures"]
use_git_change_detection = false
"""
new = text
try:
    old = open(dst, encoding="utf-8").read()
except FileNotFoundError:
    old = None
if old != new:
    open(dst, "w", encoding="utf-8").write(new)
EOF
}

# a stopped run stops its mutmut too (the one child it waits on, by its id)
child=
trap '[ -n "$child" ] && kill "$child" 2>/dev/null; exit 143' TERM INT
START=$(date +%s)
STATUS=0
RESULTS=()
for module in "${MODULES[@]}"; do
  if [ ! -f "$module" ]; then echo "mutation.sh: no module $module" >&2; STATUS=2; continue; fi
  if [ -n "$REPORT_ONLY" ]; then RESULTS+=("$module"); continue; fi     # the shards' last results, nothing run
  slug=${module%.py}; slug=${slug//\//.}
  shard="$ROOT/mutants/$slug"
  if [ -n "${TESTS[$module]:-}" ]; then
    read -r -a named <<< "$(echo ${TESTS[$module]})"
    tests=()     # a named test file not written yet is left out (an option, --deselect=..., is kept)
    for t in "${named[@]}"; do if [ "${t#-}" != "$t" ] || [ -e "${t%%::*}" ]; then tests+=("$t"); fi; done
  else mapfile -t tests < <(tests_for "$module"); fi
  if [ ${#tests[@]} -eq 0 ]; then echo "mutation.sh: no test file imports $module" >&2; STATUS=1; continue; fi
  make_shard "$module" "$shard" "${tests[@]}"
  # mutmut maps each function to the tests that reach it once (mutmut-stats.json) and reruns a mutant against
  # those alone: a test added since is never run against it (a killed survivor stays "survived", a new function
  # has "no tests"). A test file newer than the map has it made again.
  stats="$shard/mutants/mutmut-stats.json"
  if [ -f "$stats" ]; then
    for t in "${tests[@]}"; do
      if [ "${t#-}" = "$t" ] && [ "${t%%::*}" -nt "$stats" ]; then
        rm -f "$stats"; echo "   ${t%%::*} changed since the shard's map of tests: mapped again" >&2; break
      fi
    done
  fi
  limit=3600
  if [ -n "$BUDGET" ]; then
    limit=$(( BUDGET - ($(date +%s) - START) ))
    if [ "$limit" -le 5 ]; then echo "mutation.sh: budget spent before $module" >&2; RESULTS+=("$module"); continue; fi
  fi
  echo "== $module: tests ${tests[*]}" >&2
  t0=$(date +%s)
  mapfile -t only < "$shard/in_scope"     # (patterns: never expanded by the shell)
  ( cd "$shard" && exec timeout -k 10 "$limit" nice -n 19 "$PY" -m mutmut run --max-children 1 "${only[@]}" ) \
    > "$shard/run.log" 2>&1 &
  child=$!; wait "$child"; rc=$?; child=
  # mutmut keeps a result per mutant and retests only the functions whose code changed: a survivor stays one
  # after a new test unless it is named. So the survivors (of the module's scope) are named and run again.
  mapfile -t again < <("$PY" - "$shard" "$module" <<'EOF'
import fnmatch, json, os, re, sys
from mutmut.stats import status_by_exit_code
shard, module = sys.argv[1], sys.argv[2]
meta = os.path.join(shard, "mutants", module + ".meta")
scope = open(os.path.join(shard, "out_of_scope"), encoding="utf-8").read().strip()
only_file = os.path.join(shard, "in_scope")
only = open(only_file, encoding="utf-8").read().split() if os.path.exists(only_file) else []
codes = json.load(open(meta, encoding="utf-8")).get("exit_code_by_key", {}) if os.path.exists(meta) else {}
for name, code in codes.items():
    if (status_by_exit_code[code] in ("survived", "no tests", "suspicious", "segfault") and not (scope and re.search(scope, name))
            and not (only and not any(fnmatch.fnmatch(name, p) for p in only))):
        print(name)
EOF
)
  if [ $rc -eq 0 ] && [ ${#again[@]} -gt 0 ]; then
    left=$limit; [ -n "$BUDGET" ] && left=$(( BUDGET - ($(date +%s) - START) ))
    if [ "$left" -gt 5 ]; then
      echo "   retesting ${#again[@]} survivor(s)" >&2
      ( cd "$shard" && exec timeout -k 10 "$left" nice -n 19 "$PY" -m mutmut run --max-children 1 "${again[@]}" ) \
        >> "$shard/run.log" 2>&1 &
      child=$!; wait "$child"; rc=$?; child=
    fi
  fi
  echo "   mutmut exit $rc in $(( $(date +%s) - t0 )) s (log: mutants/$slug/run.log)" >&2
  RESULTS+=("$module")
done

"$PY" - "$ROOT" "$FLOOR" "$(( $(date +%s) - START ))" "${REPORT:-}" "${RESULTS[@]}" <<'EOF'
import fnmatch, json, os, re, sys
from collections import Counter
root, floor, elapsed, report, modules = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
from mutmut.stats import status_by_exit_code

equivalent = {}
path = os.path.join(root, "tests", "mutation_equivalent.txt")
# one mutant a line: its name, then the reason; lines starting with # are comments
for line in open(path, encoding="utf-8") if os.path.exists(path) else ():
    if line.strip() and not line.lstrip().startswith("#"):
        name, _, why = line.strip().partition(" ")
        equivalent[name] = why.strip()

rows, bad, survivors = [], [], []
for module in modules:
    slug = module[:-3].replace("/", ".")
    meta = os.path.join(root, "mutants", slug, "mutants", module + ".meta")
    if not os.path.exists(meta):
        rows.append((module, None)); bad.append(module); continue
    codes = json.load(open(meta, encoding="utf-8")).get("exit_code_by_key", {})
    scope_file = os.path.join(root, "mutants", slug, "out_of_scope")
    out_of_scope = open(scope_file, encoding="utf-8").read().strip() if os.path.exists(scope_file) else ""
    only_file = os.path.join(root, "mutants", slug, "in_scope")
    only = open(only_file, encoding="utf-8").read().split() if os.path.exists(only_file) else []
    c = Counter()
    for name, code in codes.items():
        status = status_by_exit_code[code]
        if (out_of_scope and re.search(out_of_scope, name)) or (only and not any(fnmatch.fnmatch(name, p) for p in only)):
            c["out of scope"] += 1
            continue
        if status == "survived" and name in equivalent:
            status = "equivalent"
        if status in ("survived", "no tests", "suspicious", "segfault"):
            survivors.append((name, status))
        c[status] += 1
    caught = c["killed"] + c["timeout"] + c["caught by type check"]
    judged = sum(c.values()) - c["equivalent"] - c["not checked"] - c["skipped"] - c["out of scope"]
    rate = 100.0 * caught / judged if judged else 0.0
    rows.append((module, (c, rate)))
    if rate < floor:
        bad.append(module)

out = ["| module | mutants | killed | timed out | survived | no tests | equivalent | out of scope | not checked | kill rate |",
       "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for module, r in rows:
    if r is None:
        out.append(f"| {module} | — | — | — | — | — | — | — | — | not run |")
        continue
    c, rate = r
    out.append(f"| {module} | {sum(c.values())} | {c['killed']} | {c['timeout']} | {c['survived']} | "
               f"{c['no tests']} | {c['equivalent']} | {c['out of scope']} | {c['not checked']} | {rate:.1f} % |")
out.append("")
partial = [m for m, r in rows if r is not None and r[0]["not checked"]]
out.append(f"floor {floor:g} %; {elapsed} s; modules below the floor (or not run): {', '.join(bad) or 'none'}")
if partial:
    out.append(f"not finished within the time given (the rate is over the mutants checked): {', '.join(partial)}")
if survivors:
    out.append("")
    out.append("survivors (`mutmut show NAME` in the module's shard, mutants/<module>/):")
    out += [f"- {n} ({s})" for n, s in sorted(survivors)]
text = "\n".join(out) + "\n"
print(text)
os.makedirs(os.path.join(root, "mutants"), exist_ok=True)
open(os.path.join(root, "mutants", "report.md"), "w", encoding="utf-8").write(text)
if report:
    open(report, "w", encoding="utf-8").write(text)
sys.exit(1 if bad else 0)
EOF
rc=$?
[ $STATUS -ne 0 ] && exit $STATUS
exit $rc
}
