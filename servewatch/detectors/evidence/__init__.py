"""The evidence more than one verdict reads, one floor below the verdicts (issue 51).

A verdict module (one of detectors/ with a `detect...` function) takes what another verdict also reads from
here, never from that verdict's module (tests/test_structure.py checks it); nothing here imports a verdict
module. `engine_signs`: the engine's dialect, its death, a requested shutdown, a /health answer, a busy
engine; `crash_loop`: restarts and deaths that repeat; `stages`: a start in progress; `gpus`: each rank's GPU.
"""
