"""server_errors, client_errors, requests_aborted: read from real expositions (a vLLM 0.32 that answered
200, 400, 404 and a 404 without route; an SGLang 0.5.23 CPU server) with their counters moved, through
the dialects and the detectors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servewatch import dialects
from servewatch.detectors import DetectorConfig, run_detectors
from servewatch.detectors.outcomes import increase, window_outcomes
from servewatch.engine.state import Counters, EngineState
from servewatch.bundle.serialize import sample_from_dict, sample_to_dict
from servewatch.timeline.samples import LogEvent, MetricsSample
from servewatch.timeline.window import Window

FIXTURES = Path(__file__).parent / "fixtures"
VLLM = (FIXTURES / "vllm_real" / "client_errors.prom").read_text()
SGLANG = (FIXTURES / "metrics" / "sglang_cpu_after.prom").read_text()
T0 = 1_800_000_000.0
OUTCOME_VERDICTS = {"server_errors", "client_errors", "requests_aborted"}


def vllm_text(*, ok=1.0, client=0.0, unrouted=0.0, server=0.0, body_bytes=100.0, bodies=1.0, abort=0.0,
              length=1.0, error=0.0, hung_up=0.0, naming_032=True) -> str:
    """As a real vLLM counts: every 2xx answer is a finished request (by default a "stop"), except those
    whose client hung up, which the engine counts nowhere."""
    stop = max(0.0, ok - length - abort - error - hung_up)
    text = VLLM
    text = re.sub(r'(http_requests_total\{handler="/v1/completions",method="POST",status="2xx"\}) \S+', rf"\1 {ok}", text)
    text = re.sub(r'(http_requests_total\{handler="/v1/completions",method="POST",status="4xx"\}) \S+',
                  rf"\1 {client}\n" f'http_requests_total{{handler="/v1/completions",method="POST",status="5xx"}} {server}',
                  text)
    text = re.sub(r'(http_requests_total\{handler="none",method="POST",status="4xx"\}) \S+', rf"\1 {unrouted}", text)
    text = re.sub(r'(http_request_size_bytes_count\{handler="/v1/completions"\}) \S+', rf"\1 {bodies}", text)
    text = re.sub(r'(http_request_size_bytes_sum\{handler="/v1/completions"\}) \S+', rf"\1 {body_bytes}", text)
    for reason, value in (("stop", stop), ("abort", abort), ("length", length), ("error", error)):
        text = re.sub(rf'(vllm:request_success_total\{{engine="0",finished_reason="{reason}",model_name="tiny"\}}) \S+',
                      rf"\1 {value}", text)
    if not naming_032:   # the 0.11 names: no waiting-by-reason, sleep state or prompt-by-source families
        text = "\n".join(line for line in text.splitlines()
                         if not re.search(r"waiting_by_reason|engine_sleep_state|prompt_tokens_by_source", line))
    return text


def sglang_text(codes: dict[str, float], *, requests: float = 21.0, aborted: float | None = None,
                generated: float | None = None) -> str:
    lines = [line for line in SGLANG.splitlines() if 'endpoint="/v1/completions"' not in line
             or not line.startswith("sglang:http_responses_total")]
    i = lines.index("# TYPE sglang:http_responses_total counter") + 1
    lines[i:i] = [f'sglang:http_responses_total{{endpoint="/v1/completions",method="POST",status_code="{code}"}} {n}'
                  for code, n in codes.items()]
    text = "\n".join(lines)
    text = re.sub(r"(sglang:num_requests_total\{[^}]*\}) \S+", rf"\1 {requests}", text)
    if generated is not None:
        text = re.sub(r"(sglang:generation_tokens_total\{[^}]*\}) \S+", rf"\1 {generated}", text)
    if aborted is not None:
        text += ("\n# TYPE sglang:num_aborted_requests_total counter\n"
                 f'sglang:num_aborted_requests_total{{engine_type="unified",model_name="/models/tiny"}} {aborted}\n')
    return text + "\n"


def scrape(t: float, text: str) -> MetricsSample:
    read = dialects.read_scrape(text)
    return MetricsSample(t=t, dialect=read.dialect, naming=read.naming, engines=tuple(read.engines))


def series(texts, step: float = 5.0) -> list[MetricsSample]:
    return [scrape(T0 + i * step, text) for i, text in enumerate(texts)]


def verdicts(samples, config: DetectorConfig | None = None) -> dict:
    found = run_detectors(Window.from_samples(samples), config or DetectorConfig())
    return {v.name: v for v in found if v.name in OUTCOME_VERDICTS}


def test_the_real_vllm_scrape_reads_status_classes_without_the_watchers_own_endpoints():
    counters = dialects.read_scrape(VLLM).engines[0].counters
    assert counters.responses == {"2xx": 1.0, "4xx": 4.0, "unrouted": 1.0}   # /health, /metrics polls left out
    assert (counters.request_bytes, counters.request_bytes_count) == (4261.0, 5.0)
    assert counters.finished["length"] == 1.0


def test_the_older_vllm_generation_reads_the_same_counters():
    read = dialects.read_scrape(vllm_text(ok=3, client=2, naming_032=False))
    assert read.naming == "vllm-0.11"
    assert read.engines[0].counters.responses == {"2xx": 3.0, "4xx": 2.0, "5xx": 0.0, "unrouted": 0.0}


def test_sglang_reads_exact_codes_of_request_endpoints_only():
    counters = dialects.read_scrape(SGLANG).engines[0].counters
    assert counters.responses == {"200": 21.0}     # /generate + /v1/completions; /health, /metrics, ... left out
    assert counters.finished == {"all": 21.0}


def test_a_storm_of_over_length_prompts_is_a_client_error_finding_naming_the_input_limit():
    # 40 requests of ~4,000 bytes rejected in 30 s, 5 served; the log said the model takes 512 tokens
    texts = [vllm_text(ok=10 + i, client=8 * i, body_bytes=1000 + 4060 * 8 * i + 80 * i, bodies=10 + 9 * i)
             for i in range(6)]
    samples = series(texts) + [LogEvent(T0 - 60, "startup", {"stage": "kv_cache_size", "tokens": 8192,
                                                             "per_request": 512, "concurrency": 16.0})]
    found = verdicts(samples)
    assert set(found) == {"client_errors"}
    verdict = found["client_errors"]
    assert verdict.details["cause"] == "input_too_long"
    assert verdict.details["errors"] == 40 and verdict.details["responses"] == 45
    assert "40 × 4xx" in verdict.why and "maximum length" in verdict.why and "512 tokens" in verdict.why


def test_without_the_models_length_the_cause_is_the_servers_validation():
    texts = [vllm_text(ok=10 + i, client=8 * i, body_bytes=1000 + 4060 * 8 * i, bodies=10 + 9 * i) for i in range(6)]
    found = verdicts(series(texts))
    assert found["client_errors"].details["cause"] == "invalid_request"


def test_requests_to_a_path_without_route_name_the_path():
    texts = [vllm_text(ok=10 + i, unrouted=10 * i) for i in range(6)]
    found = verdicts(series(texts))
    assert found["client_errors"].details["cause"] == "unknown_path"
    assert "404 (no route)" in found["client_errors"].why


def test_server_errors_are_an_incident_with_the_rate_and_share():
    texts = [vllm_text(ok=100 + 10 * i, server=3 * i) for i in range(6)]   # 15 of 65 in 25 s
    found = verdicts(series(texts))
    assert set(found) == {"server_errors"}
    verdict = found["server_errors"]
    assert verdict.details["errors"] == 15 and verdict.details["responses"] == 65
    assert verdict.details["per_s"] == pytest.approx(15 / 25)
    assert "15 of 65 responses" in verdict.why and "5xx" in verdict.why


def test_engine_side_errors_count_as_server_errors():
    texts = [vllm_text(ok=10 + 10 * i, length=10 + 6 * i, error=4 * i) for i in range(6)]
    found = verdicts(series(texts))
    assert found["server_errors"].details["engine_errors"] == 20
    assert "reason error" in found["server_errors"].why


def test_a_few_errors_among_many_responses_raise_nothing():
    texts = [vllm_text(ok=1000 + 200 * i, server=i // 3, client=i) for i in range(6)]
    assert verdicts(series(texts)) == {}


def test_cumulative_errors_from_before_the_window_raise_nothing():
    # 500 client and 80 server errors happened long ago; in the window only successes arrive
    texts = [vllm_text(ok=10 + 5 * i, client=500, server=80, unrouted=40) for i in range(6)]
    assert verdicts(series(texts)) == {}


def test_errors_older_than_the_outcome_window_have_cleared():
    storm = [vllm_text(ok=10, server=5 * i) for i in range(6)]
    calm = [vllm_text(ok=10 + 10 * i, server=25) for i in range(1, 20)]
    samples = series(storm + calm)
    assert "server_errors" in verdicts(samples[:6])
    assert verdicts(samples) == {}        # 95 s later: the last 60 s hold only successes


def test_a_counter_reset_counts_what_came_after_it():
    assert increase([10, 12, 3, 5]) == 2 + 3 + 2
    texts = [vllm_text(ok=50, server=40), vllm_text(ok=50, server=44), vllm_text(ok=1, server=6),
             vllm_text(ok=2, server=12)]
    outcomes = window_outcomes(Window.from_samples(series(texts)), DetectorConfig())
    assert outcomes.by_class("5xx") == 4 + 6 + 6


def test_aborted_requests_are_clients_giving_up():
    texts = [vllm_text(ok=10 + 8 * i, length=10 + 4 * i, abort=4 * i) for i in range(6)]
    found = verdicts(series(texts))
    assert set(found) == {"requests_aborted"}
    assert found["requests_aborted"].details["aborted"] == 20
    assert "gave up" in found["requests_aborted"].why


def test_clients_hanging_up_are_aborts_although_vllm_counts_them_nowhere():
    # answered 2xx by the API server, never counted finished: 24 of 40 answers in 20 s
    texts = [vllm_text(ok=10 + 8 * i, hung_up=6 * i) for i in range(5)]
    found = verdicts(series(texts))
    assert set(found) == {"requests_aborted"}
    verdict = found["requests_aborted"]
    assert verdict.details["hung_up"] == 24 and verdict.details["aborted"] == 24 and verdict.details["finished"] == 32
    assert "24 answered by the API server but never counted finished" in verdict.why
    assert {e.field for e in verdict.evidence} >= {"counters.answered"}


def test_answers_the_engine_counted_finished_are_no_hang_ups():
    texts = [vllm_text(ok=10 + 8 * i, length=1 + 8 * i) for i in range(5)]
    assert verdicts(series(texts)) == {}
    assert window_outcomes(Window.from_samples(series(texts)), DetectorConfig()).answered == 32


def test_aborts_of_a_dying_engine_are_left_to_engine_dead():
    texts = [vllm_text(ok=10 + 8 * i, length=10 + 4 * i, abort=4 * i) for i in range(6)]
    death = LogEvent(T0 + 24, "engine_dead", {"reason": "EngineCore encountered a fatal error."})
    names = {v.name for v in run_detectors(Window.from_samples([*series(texts), death]), DetectorConfig())}
    assert "engine_dead" in names and "requests_aborted" not in names


def test_sglang_codes_name_the_cause_and_5xx_is_a_server_error():
    not_found = [sglang_text({"200": 20 + i, "404": 6 * i}) for i in range(6)]
    assert verdicts(series(not_found))["client_errors"].details["cause"] == "not_found"
    failing = [sglang_text({"200": 20 + 5 * i, "500": 2 * i, "503": i}) for i in range(6)]
    verdict = verdicts(series(failing))["server_errors"]
    assert verdict.details["errors"] == 15 and "10 × 500" in verdict.why and "5 × 503" in verdict.why


def test_sglang_aborted_requests_against_all_finished():
    texts = [sglang_text({"200": 20 + 4 * i}, requests=21 + 4 * i, aborted=2 * i) for i in range(6)]
    assert verdicts(series(texts))["requests_aborted"].details["finished"] == 20


def test_the_thresholds_are_settings():
    texts = [vllm_text(ok=100 + 10 * i, server=3 * i) for i in range(6)]
    assert verdicts(series(texts), DetectorConfig(server_error_fraction=0.5)) == {}
    assert verdicts(series(texts), DetectorConfig(server_error_min=16)) == {}


def test_response_counts_survive_a_bundle_round_trip():
    sample = scrape(T0, vllm_text(ok=7, client=3, server=1, unrouted=2))
    back = sample_from_dict(sample_to_dict(sample))
    assert back.engines[0].counters.responses == {"2xx": 7.0, "4xx": 3.0, "5xx": 1.0, "unrouted": 2.0}
    assert back.engines[0].counters.request_bytes == sample.engines[0].counters.request_bytes


def test_a_bundle_keeps_no_status_key_of_another_shape():
    state = EngineState(dialect="vllm", naming="vllm-0.32", labels={},
                        counters=Counters(responses={"4xx": 1.0, "/v1/secret-path": 5.0}))
    stored = sample_to_dict(MetricsSample(t=T0, dialect="vllm", naming="vllm-0.32", engines=(state,)))
    assert stored["engines"][0]["counters"]["responses"] == {"4xx": 1.0}


def test_sglang_health_probes_that_timed_out_are_not_clients_giving_up():
    # SGLang 0.5.23's /health runs a generation; a probe that times out hangs up on it, and SGLang counts
    # that aborted (never finished). A scheduler stopped for 26 s under our watch: 19 aborts, 5 finished.
    from servewatch.timeline.samples import HealthSample
    texts = [sglang_text({"200": 20 + i}, requests=21 + i, aborted=4 * i) for i in range(6)]
    samples = series(texts)
    timeouts = [HealthSample(t=T0 + 0.5 + k, status=None, latency_s=None, error="timeout") for k in range(21)]
    assert "requests_aborted" in verdicts(samples)
    assert "requests_aborted" not in verdicts([*samples, *timeouts])
    # vLLM's /health runs no generation: its timeouts are not requests.
    vllm = series([vllm_text(ok=10 + 8 * i, length=10 + 4 * i, abort=4 * i) for i in range(6)])
    assert "requests_aborted" in verdicts([*vllm, *timeouts])


def _stopped_scheduler(*, progress_while_stopped: bool) -> list:
    """A real SGLang 0.5.23 whose scheduler was SIGSTOPped for 26 s with 6 requests running, scraped
    every second: generation tokens still, our /health probes timing out every 2 s, and 20 requests
    counted aborted one by one (our health probes and those of a 2 s health poller, each of which runs a
    generation and hangs up on it); after SIGCONT it generates again and counts no more aborts."""
    from servewatch.timeline.samples import HealthSample
    samples, generated, aborted = [], 14_000.0, 0.0
    for i in range(40):
        t = T0 + i
        stopped = 4 <= i < 30
        if not stopped or progress_while_stopped:
            generated += 300
        if stopped and i >= 7 and aborted < 20:
            aborted += 1
        samples.append(scrape(t, sglang_text({"200": 93}, requests=93, aborted=aborted, generated=generated)))
        if stopped and i >= 6 and i % 2 == 0:
            samples.append(HealthSample(t=t + 0.5, status=None, latency_s=None, error="timeout"))
        elif not stopped:
            samples.append(HealthSample(t=t + 0.5, status=200, latency_s=0.05))
    return samples


def _fired_as_watched(samples, name: str) -> list[float]:
    """When `name` held, evaluating the window at every scrape as watch does."""
    found = []
    for i, sample in enumerate(samples):
        if isinstance(sample, MetricsSample) and name in verdicts(samples[:i + 1]):
            found.append(sample.t - T0)
    return found


def test_sglang_aborts_while_its_scheduler_is_stopped_belong_to_the_stall():
    samples = _stopped_scheduler(progress_while_stopped=False)
    assert _fired_as_watched(samples, "requests_aborted") == []
    stall = [v.name for v in run_detectors(Window.from_samples([s for s in samples if s.t < T0 + 30]))]
    assert "alive_health_ok_no_progress" in stall or "health_loss" in stall, stall
    # The same aborts while the engine generates and /health fails are clients giving up.
    assert _fired_as_watched(_stopped_scheduler(progress_while_stopped=True), "requests_aborted")


def test_hang_ups_right_after_a_fresh_vllm_served_its_first_requests_are_seen_at_once():
    # A real vLLM 0.32 declares http_requests_total with no series until its first answer; its engine's
    # finished counters read 0 from the start. Watched from startup: 12 served, then 8 streams closed by
    # their client after the first chunk. Reading the missing series as "unknown" left the first answers
    # out of the count, and requests_aborted waited a whole outcome window (55 s) to fire.
    fresh = (FIXTURES / "vllm_real" / "idle.prom").read_text()
    texts = [fresh, vllm_text(ok=10, length=10), vllm_text(ok=12, length=12), vllm_text(ok=20, length=12, hung_up=8)]
    assert scrape(T0, fresh).engines[0].counters.answered == 0
    verdict = verdicts(series(texts))["requests_aborted"]
    assert verdict.details["hung_up"] == 8 and verdict.details["finished"] == 20


def test_answers_still_ending_at_the_windows_first_scrape_are_not_hang_ups():
    # As on a real vLLM 0.32 in CI: the window's first scrape came after the engine had counted two
    # requests finished but before their answers ended; 8 streams hung up later were counted as 10.
    texts = [vllm_text(ok=10, length=10),                 # outside the window: the scrape before
             vllm_text(ok=10, length=12),                 # two finished, their answers still ending
             vllm_text(ok=12, length=12),
             vllm_text(ok=12, length=12),
             vllm_text(ok=20, length=12, hung_up=8),      # 8 clients hang up mid-answer
             vllm_text(ok=20, length=12, hung_up=8)]
    config = DetectorConfig(outcome_window_s=4.5)
    verdict = verdicts(series(texts, step=1.0), config)["requests_aborted"]
    assert verdict.details["hung_up"] == 8, verdict.why
    assert verdict.details["finished"] == 8

    # Hang-ups in the window's first stretch with no request finished before it are all counted.
    texts = [vllm_text(ok=12, length=12), vllm_text(ok=12, length=12), vllm_text(ok=20, length=12, hung_up=8),
             vllm_text(ok=20, length=12, hung_up=8)]
    assert verdicts(series(texts, step=1.0), DetectorConfig(outcome_window_s=2.5))["requests_aborted"].details["hung_up"] == 8

    # As in another CI run: the first good scrape of a fresh vLLM came mid-stream, the engine had finished
    # 2 and the API server answered 1; no scrape before it to compare with. 8 were counted as 9.
    texts = [vllm_text(ok=1, length=2), vllm_text(ok=12, length=12), vllm_text(ok=12, length=12),
             vllm_text(ok=20, length=12, hung_up=8), vllm_text(ok=20, length=12, hung_up=8)]
    verdict = verdicts(series(texts, step=1.0), DetectorConfig(outcome_window_s=4.5))["requests_aborted"]
    assert verdict.details["hung_up"] == 8, verdict.why
