"""`servewatch proxy`: an OpenAI-compatible pass-through that records every request's truth."""

from servewatch.proxy.config import ProxyConfig
from servewatch.proxy.server import Proxy

__all__ = ["Proxy", "ProxyConfig"]
