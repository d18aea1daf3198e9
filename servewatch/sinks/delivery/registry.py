"""The live sinks `serve` can deliver to, each registered under a name by a factory (in the manner of the
OpenTelemetry Collector's component factories).

A name is at once the config key (`alertmanager: URL`), the command-line flag (`--alertmanager URL`) and the
`sink` label of `servewatch_sink_failures`. A factory takes the URL and what every client is given
(`SinkContext`) and returns a client: one per process, `client.sink(target)` giving each target's sink
(`base.Sink`), `client.close()` once at the end. `serve` builds the clients of the names its config gives
(`build_clients`) and adds each client's sink to every target's recorder.

A new sink kind is its module in `sinks/` and one `register_sink(...)` line at the end of this file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from servewatch.sinks.base import Sink


@dataclass(frozen=True, slots=True)
class SinkContext:
    """What every client gets besides its URL: the running command (for its messages) and a counter to
    call when a delivery is given up."""

    tool: str
    on_give_up: Callable[[], None]


class SinkClient(Protocol):
    def sink(self, target: str) -> Sink:
        """The sink of one target."""

    def close(self) -> None:
        """Deliver what is queued (bounded in time), then stop."""


SinkFactory = Callable[[str, SinkContext], SinkClient]


@dataclass(frozen=True, slots=True)
class SinkKind:
    name: str
    factory: SinkFactory
    help: str              # the flag's help: what the sink does with the URL


_KINDS: dict[str, SinkKind] = {}


def register_sink(name: str, factory: SinkFactory, *, help: str) -> None:
    """Make `name` a sink kind: a config key and a flag taking a URL, built by `factory(url, context)`."""
    if not name.isidentifier() or name != name.lower():
        raise ValueError(f"sink name {name!r}: lower-case letters, digits and underscores")
    if name in _KINDS:
        raise ValueError(f"sink {name!r} is registered twice")
    _KINDS[name] = SinkKind(name, factory, help)


def sink_kinds() -> tuple[SinkKind, ...]:
    """Every registered kind, in registration order."""
    return tuple(_KINDS.values())


def sink_names() -> tuple[str, ...]:
    return tuple(_KINDS)


def build_clients(urls: Mapping[str, str], context: Callable[[str], SinkContext]) -> list[SinkClient]:
    """A client for each (name, URL) given, in registration order; `context(name)` is its context."""
    return [kind.factory(urls[kind.name], context(kind.name)) for kind in _KINDS.values() if urls.get(kind.name)]


def sinks_for(clients: Iterable[SinkClient], target: str) -> list[Sink]:
    return [client.sink(target) for client in clients]


def client_class(where: str) -> SinkFactory:
    """A factory for a client class `Client(url, *, on_give_up, tool)` named "module:Class", imported only
    when a config asks for it."""
    module, _, name = where.partition(":")

    def factory(url: str, context: SinkContext) -> SinkClient:
        import importlib

        return getattr(importlib.import_module(module), name)(url, on_give_up=context.on_give_up, tool=context.tool)

    return factory


register_sink("alertmanager", client_class("servewatch.sinks.delivery.alertmanager:AlertmanagerClient"),
              help="post alerts to this Alertmanager (v2 API)")
register_sink("webhook", client_class("servewatch.sinks.delivery.webhook:WebhookClient"),
              help="post fired/cleared events as JSON to this URL")
