"""A target's sidecar proxy inside serve: `servewatch proxy` in front of the target, its requests one
more source of the target's recorder (as `proxy --watch` records them), its records file and its own
GenAI metrics (served at /targets/NAME/proxy/metrics)."""

from __future__ import annotations

import asyncio
import contextlib

from servewatch.errors import ServewatchError
from servewatch.proxy import Proxy, ProxyConfig
from servewatch.proxy.recordlog import RecordLog, flush_forever, record_sink
from servewatch.proxy.signals import RequestsSource
from servewatch.proxy.telemetry import Telemetry
from servewatch.serve.targets import TargetSpec


class Sidecar:
    def __init__(self, spec: TargetSpec):
        p = spec.proxy
        self.spec = p
        self.name = spec.name
        self.log: RecordLog | None = None
        self.telemetry = Telemetry(sample=0.0)
        self.proxy = Proxy(ProxyConfig(upstream=spec.url, max_connections=p.max_connections,
                                       first_byte_timeout_s=p.first_byte_timeout_s,
                                       read_idle_timeout_s=p.read_timeout_s, tenant_header=p.tenant_header,
                                       keep_itl=p.keep_itl),
                           on_record=self.telemetry.observe)
        self.telemetry.proxy = self.proxy
        self.port: int | None = None
        self._flusher: asyncio.Task | None = None

    def source(self, clock, interval: float) -> RequestsSource:
        return RequestsSource(self.proxy, clock, interval)

    async def start(self) -> int:
        """Bind and serve. A proxy that cannot listen or write its records is one line (ServewatchError)."""
        from servewatch.serve.config import parse_listen

        host, port = parse_listen(self.spec.listen, "proxy listen")
        if self.spec.tenant_key_file:
            from dataclasses import replace

            from servewatch.proxy.config import tenant_key

            try:
                key = tenant_key(self.spec.tenant_key_file)
            except (OSError, ValueError) as exc:
                raise ServewatchError(f"{self.name}: proxy tenant_key_file {self.spec.tenant_key_file}: "
                                      f"{getattr(exc, 'strerror', None) or exc}") from None
            self.proxy.config = replace(self.proxy.config, tenant_key=key)
        if self.spec.records:
            try:
                self.log = RecordLog(self.spec.records, max_bytes=int(self.spec.records_max_mb * 2**20),
                                     keep=self.spec.records_keep, what=f"{self.name}: proxy records")
                self.telemetry.log = self.log
                self.proxy.on_record = record_sink(self.log, self.telemetry)
            except OSError as exc:
                raise ServewatchError(f"{self.name}: proxy records {self.spec.records}: "
                                      f"{exc.strerror or exc}") from None
        try:
            self.port = await self.proxy.start(host, port)
        except OSError as exc:
            if self.log is not None:
                self.log.close()
            raise ServewatchError(f"{self.name}: proxy listen {self.spec.listen}: {exc.strerror or exc}") from None
        if self.log is not None:
            self._flusher = asyncio.create_task(flush_forever(self.log))
        return self.port

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        await self.proxy.close()
        if self.log is not None:
            self.log.close()
            self.log = None
