"""What makes the simulated engine a vLLM or an SGLang: one `EngineBehaviour` per engine, looked up by
dialect name in `BEHAVIOURS`. The engine, the scheduler and the HTTP server are shared; everything that
differs between the engines is a field here.

A registered dialect with no entry here is simulated from its dialect alone (`behaviour_for`): its /metrics
rendered from the series it declares (servewatch.sim.metrics_series), its /health "200 while alive, its
dead status once dead" (503 with its loading message while starting, where it states one), its slot listing
where it has one, /metrics and slots that wait on a stalled loop where its do, no engine log lines. A new engine's
simulator is then nothing but its dialect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

from servewatch import dialects
from servewatch.sim.logs import SGLANG_VERSION, VLLM_VERSION, LogSink, QuietLog, SglangLog, VllmLog

TOKENIZE, LOAD = "tokenize", "load"     # optional endpoints an engine may serve (see server.OPTIONAL_ROUTES)


@dataclass(frozen=True)
class EngineBehaviour:
    name: str                                  # the dialect name: `--dialect`, SimConfig.dialect
    version: str                               # GET /version
    model_owner: str                           # GET /v1/models: owned_by
    make_metrics: Callable[[object, float], object]   # (engine, created) -> the /metrics writer
    make_log: Callable[[object, LogSink], object]     # (engine, sink) -> the log-line writer
    error_body: Callable[[int, str], dict]     # (status, message) -> the JSON body of an error response
    # Startup: whether the port opens at once (answering /health 503 until ready) or only once ready.
    listens_while_starting: bool
    # /health: a real one-token generation that fails once a stall outlasts `health_timeout`,
    # instead of "200 while the engine lives, stalled or not".
    health_generates: bool
    # A batch hung for `watchdog_timeout` kills the server (a watchdog), instead of hanging forever.
    stall_watchdog: bool
    # Writes a throughput line every `log_stats_interval` while ready or dead.
    periodic_stats_log: bool
    # Writes the HTTP server's shutdown lines when the process exits or is stopped.
    logs_shutdown: bool
    # Writes a "ready" banner once the engine is ready to serve.
    logs_ready_banner: bool
    # A request whose client went away is counted finished (reason abort) in /metrics. A real vLLM 0.32
    # counts it nowhere: 8 streams closed after their first chunk left request_success_total flat.
    counts_client_aborts: bool = True
    optional_endpoints: frozenset[str] = frozenset()
    # The dialect's slot listing (GET, JSON), where it has one (Dialect.slots_path).
    slots_path: str | None = None
    # /metrics and the slot listing wait on the engine's loop (Dialect.metrics_wait_on_engine): a stall leaves them
    # unanswered while /health stays 200 (a decode-loop hang).
    metrics_wait_on_engine: bool = False
    # The message of the 503 every endpoint answers while starting (Dialect.loading_message), where there is one.
    loading_message: str | None = None


def _vllm_metrics(engine, created: float):
    from servewatch.sim.metrics_vllm import VllmMetrics
    return VllmMetrics(engine, created=created)


def _sglang_metrics(engine, created: float):
    from servewatch.sim.metrics_sglang import SglangMetrics
    return SglangMetrics(engine, created=created)


def _openai_error(status: int, message: str) -> dict:
    kind = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}.get(
        status, HTTPStatus(status).phrase)
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _sglang_error(status: int, message: str) -> dict:
    return {"object": "error", "message": message, "type": HTTPStatus(status).phrase, "code": status}


VLLM = EngineBehaviour(
    name="vllm", version=VLLM_VERSION, model_owner="vllm",
    make_metrics=_vllm_metrics, make_log=VllmLog, error_body=_openai_error,
    listens_while_starting=False, health_generates=False, stall_watchdog=False,
    periodic_stats_log=True, logs_shutdown=True, logs_ready_banner=False, counts_client_aborts=False,
    optional_endpoints=frozenset({TOKENIZE, LOAD}),
)

SGLANG = EngineBehaviour(
    name="sglang", version=SGLANG_VERSION, model_owner="sglang",
    make_metrics=_sglang_metrics, make_log=SglangLog, error_body=_sglang_error,
    listens_while_starting=True, health_generates=True, stall_watchdog=True,
    periodic_stats_log=False, logs_shutdown=False, logs_ready_banner=True,
)

BEHAVIOURS: dict[str, EngineBehaviour] = {b.name: b for b in (VLLM, SGLANG)}


def behaviour_for(name: str) -> EngineBehaviour | None:
    """The behaviour of the engine `name`: a built-in one, or one made from its registered dialect (its
    metric naming rendered by the simulator); None when no registered dialect names alert series."""
    if name in BEHAVIOURS:
        return BEHAVIOURS[name]
    dialect = dialects.by_name(name)
    series = dialect.simulator_series() if dialect is not None else None
    if series is None:
        return None

    def make_metrics(engine, created: float):
        from servewatch.sim.metrics_series import SeriesMetrics
        return SeriesMetrics(engine, created, series)

    return EngineBehaviour(
        name=name, version="0", model_owner=name, make_metrics=make_metrics, make_log=QuietLog,
        error_body=_openai_error, listens_while_starting=dialect.loading_message is not None, health_generates=False,
        stall_watchdog=False, periodic_stats_log=False, logs_shutdown=False, logs_ready_banner=False,
        slots_path=dialect.slots_path, metrics_wait_on_engine=dialect.metrics_wait_on_engine,
        loading_message=dialect.loading_message)


def engine_names() -> tuple[str, ...]:
    """Every engine the simulator speaks: the built-ins, then registered dialects that name their series."""
    return tuple(dict.fromkeys((*BEHAVIOURS, *(d.name for d in dialects.registered() if d.simulator_series()))))
