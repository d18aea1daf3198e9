"""The fleet's own Prometheus as service discovery: its /api/v1/targets, filtered by job and labels, so
whatever discovers the engines for Prometheus (Kubernetes, Consul, EC2) discovers them for servewatch.
A failed refresh keeps the last good set."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from servewatch.errors import ServewatchError
from servewatch.serve.targets import TargetSpec, spec_for

MAX_BYTES = 32 * 2**20
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class PrometheusSdConfig:
    url: str                                    # the Prometheus server, e.g. http://prometheus:9090
    job: str | None = None                      # keep targets of this job only
    labels: dict[str, str] = field(default_factory=dict)   # ...and with these label values
    refresh_s: float = 30.0


def targets_from_api(body: bytes | str, config: PrometheusSdConfig) -> list[TargetSpec]:
    """The active targets of an /api/v1/targets answer that match the job and labels. Raises
    ServewatchError on an answer that is not the API's shape."""
    try:
        document = json.loads(body)
        active = document["data"]["activeTargets"]
    except (ValueError, KeyError, TypeError):
        raise ServewatchError("not a Prometheus /api/v1/targets answer") from None
    if not isinstance(active, list):
        raise ServewatchError("not a Prometheus /api/v1/targets answer")
    specs = []
    for target in active:
        if not isinstance(target, dict):
            continue
        labels = target.get("labels") or {}
        if config.job is not None and labels.get("job") != config.job:
            continue
        if any(labels.get(key) != value for key, value in config.labels.items()):
            continue
        scrape_url = target.get("scrapeUrl")
        if not isinstance(scrape_url, str):
            continue
        try:
            specs.append(spec_for(scrape_url))
        except ServewatchError:
            continue          # a scheme servewatch does not speak: not one of its targets
    return specs


class PrometheusSd:
    def __init__(self, config: PrometheusSdConfig):
        self.config = config
        self._targets: list[TargetSpec] = []
        self.errors = 0
        self._failing = False

    def targets(self) -> list[TargetSpec]:
        return list(self._targets)

    async def refresh(self, transport) -> tuple[bool, str | None]:
        """(changed, an error line to say — only when a run of failures starts)."""
        from servewatch.sources.http import fetch
        from servewatch.sources.scrape import ScrapeFailure

        url = self.config.url.rstrip("/") + "/api/v1/targets?state=active"
        answer = await fetch(transport, url, timeout_s=TIMEOUT_S, max_bytes=MAX_BYTES)
        problem = None
        if isinstance(answer, ScrapeFailure):
            problem = answer.detail or answer.kind
        elif answer.status != 200:
            problem = f"HTTP {answer.status}"
        else:
            try:
                specs = targets_from_api(answer.body, self.config)
            except ServewatchError as exc:
                problem = str(exc)
        if problem is not None:
            self.errors += 1
            said = None if self._failing else (f"Prometheus service discovery {self.config.url}: {problem}; "
                                               f"keeping the last {len(self._targets)} target(s)")
            self._failing = True
            return False, said
        self._failing = False
        changed = specs != self._targets
        self._targets = specs
        return changed, None
