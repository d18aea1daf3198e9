"""The compiled parts of servewatch (issue 54): the proxy's inline read path (servewatch/proxy/_inline.c), its pump
(servewatch/proxy/_pump.c) and the scrape read through a layout (servewatch/exposition/_layout.c).

Optional: where one cannot be built (no C compiler, no Python headers) the install goes on without it and its
pure-Python path is used (servewatch.proxy.server and servewatch.exposition.layout choose at import). Everything
else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("servewatch.proxy._inline", ["servewatch/proxy/_inline.c"], optional=True,
                             extra_compile_args=["-O2"]),
                   # the proxy's pump: a streamed body moved between the sockets by a native thread (Linux)
                   Extension("servewatch.proxy._pump", ["servewatch/proxy/_pump.c"], optional=True,
                             extra_compile_args=["-O2"]),
                   # serve's scrape read through the last scrape's layout (servewatch.exposition.layout chooses)
                   Extension("servewatch.exposition._layout", ["servewatch/exposition/_layout.c"], optional=True,
                             extra_compile_args=["-O2"])])
