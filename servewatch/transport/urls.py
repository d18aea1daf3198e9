"""The one URL checker: every URL of a server a user gives (`watch`, `guard`, `serve --target` and serve.yaml,
`inspect`, `diagnose`, `canary`, `load`, `drill --target`, `proxy --upstream`, `advise --against`, dcgm-exporter's
page) is read here, so that brackets, schemes, ports and host names are checked the same way everywhere and a
bad one is one line (`BadUrl`, exit status 2) before anything starts.

The rules: http or https (a bare HOST:PORT means http); a host that is an IP address (IPv6 in brackets,
closed) or a host name of letters, digits, `-`, `_` and `.`; a port, when given, from 1 to 65535. A host name
that does not resolve is named as such (`resolve`, `UNRESOLVED`), never "could not connect".
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from servewatch.errors import USAGE, ServewatchError

SCHEMES = ("http", "https")
EXAMPLE = "write http://HOST:PORT"
_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


class BadUrl(ServewatchError, ValueError):
    """A URL that is not an http(s) URL of a server: the one line names it and what is wrong.
    A ValueError too, for the callers of `Endpoint.parse` that catch one."""

    exit_code = USAGE
    reason = ""             # what is wrong, without the URL


class HostNotResolved(ServewatchError):
    """A host name that the resolver of this machine does not know."""

    exit_code = USAGE


@dataclass(frozen=True)
class ServerUrl:
    scheme: str
    host: str               # without brackets: "::1", "127.0.0.1", "vllm.internal"
    port: int               # the given port, else the scheme's (80, 443)
    path: str               # as given ("" or "/metrics" ...)
    netloc: str             # host[:port] as given, brackets kept, user info dropped

    @property
    def base(self) -> str:
        """scheme://host:port as given (a path or a query dropped)."""
        return f"{self.scheme}://{self.netloc}"

    @property
    def is_ip(self) -> bool:
        return _ip(self.host)


def _ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _valid_host_name(host: str) -> bool:
    name = host[:-1] if host.endswith(".") else host
    return 0 < len(name) <= 253 and all(_LABEL.fullmatch(label) for label in name.split("."))


def parse(url: object, what: str | None = None) -> ServerUrl:
    """`url` as a server's URL, or BadUrl naming it (after `what`, e.g. "--upstream") and what is wrong."""
    shown = f"{what} {url!r}" if what else repr(url)

    def bad(reason: str) -> BadUrl:
        error = BadUrl(f"{shown}: {reason}")
        error.reason = reason
        return error

    if not isinstance(url, str) or not url.strip():
        raise bad(f"not an http(s) URL ({EXAMPLE})")
    if any(ch.isspace() for ch in url):
        raise bad(f"not an http(s) URL: it holds a space ({EXAMPLE})")
    if "://" not in url:
        # A bare HOST:PORT is taken as http://HOST:PORT; a bare word (no scheme, no port) is no URL.
        head = url.split("/", 1)[0]
        if ":" not in head or head.startswith(":"):
            raise bad(f"not an http(s) URL ({EXAMPLE})")
        text = f"http://{url}"
    else:
        text = url
    if text.count("[") != text.count("]"):
        raise bad("an unclosed '[' (an IPv6 address is written in brackets, e.g. http://[::1]:8000)")
    try:
        parts: SplitResult = urlsplit(text)
    except ValueError:
        raise bad("not a valid URL: brackets hold an IPv6 address only, e.g. http://[::1]:8000") from None
    if parts.scheme.lower() not in SCHEMES:
        raise bad(f"not an http(s) URL: the scheme is {parts.scheme or 'missing'} ({EXAMPLE})")
    host = parts.hostname or ""
    if not host:
        raise bad(f"not an http(s) URL: no host ({EXAMPLE})")
    netloc = parts.netloc.rsplit("@", 1)[-1]
    if "[" in netloc:
        if not _ip(host) or ":" not in host:
            raise bad(f"bad host [{host}]: brackets hold an IPv6 address only")
    elif not (_ip(host) or _valid_host_name(host)):
        raise bad(f"bad host name {host!r}: letters, digits, '-', '_' and '.' only ({EXAMPLE})")
    try:
        port = parts.port
    except ValueError:
        raise bad("bad port: a number from 1 to 65535") from None
    if port is None and netloc.endswith(":"):
        raise bad("bad port: empty (a number from 1 to 65535)")
    if port == 0:
        raise bad("bad port 0: a number from 1 to 65535")
    scheme = parts.scheme.lower()
    return ServerUrl(scheme, host, port or (443 if scheme == "https" else 80), parts.path, netloc)


def check(url: str, what: str | None = None) -> str:
    """`url` unchanged if it is a server's URL (see `parse`), else BadUrl."""
    parse(url, what)
    return url


def unresolved_words(host: str | None) -> str:
    """How a DNS failure (socket.gaierror) reads wherever a connection failure is worded."""
    return f"the host name {host} could not be resolved" if host else "the host name could not be resolved"


def resolve(url: str, what: str | None = None) -> ServerUrl:
    """`parse`, then the host name looked up once: HostNotResolved (one line, status 2) when this machine's
    resolver does not know it. For a command that starts on one server the user named: a typo is said at
    once, not watched forever as a server that does not answer."""
    parsed = parse(url, what)
    if parsed.is_ip:
        return parsed
    try:
        socket.getaddrinfo(parsed.host, parsed.port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        shown = f"{what} {url!r}" if what else repr(url)
        raise HostNotResolved(f"{shown}: {unresolved_words(parsed.host)}") from None
    except (OSError, UnicodeError):
        pass        # not a DNS verdict (e.g. an IDNA oddity): left to the connection, which words its own failure
    return parsed
