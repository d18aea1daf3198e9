"""servewatch: flight recorder, doctor and watchdog for vLLM and SGLang servers."""

__version__ = "0.1.0"
