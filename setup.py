"""The one compiled part of servewatch: the proxy's inline read path (servewatch/proxy/_inline.c, issue 54).

Optional: where it cannot be built (no C compiler, no Python headers) the install goes on without it and the
proxy counts each read in pure Python (servewatch.proxy.server chooses at import). Everything else is in
pyproject.toml.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("servewatch.proxy._inline", ["servewatch/proxy/_inline.c"], optional=True,
                             extra_compile_args=["-O2"])])
