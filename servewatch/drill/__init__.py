"""`servewatch drill`: fault drills against a vLLM or SGLang server (or the built-in simulator) — inject,
measure detection, client impact and recovery, and report whether the plan's expectations held."""
