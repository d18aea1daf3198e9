"""Two structural checks on the source (ast), each shown able to fail.

No import cycle between the package's modules, counting imports inside functions too (a detector that imports
another inside a function to silence itself is the circle the registry's `yields_to` replaced).

No package reaches into another's private names: a `_name` is its module's own business (or its package's), so a
caller in another package uses a public name, or the module makes one public. Checked on the source (ast): `from
servewatch.pkg.mod import _name`, and `mod._name` where `mod` is a servewatch module imported from another package."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "servewatch"


def _package(module: str) -> str:
    """servewatch.detectors.ranks -> detectors; servewatch.cli -> cli."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def crossings(source: str, module: str) -> list[str]:
    """The private names `source` (the module `module`) takes from another servewatch package."""
    tree = ast.parse(source)
    mine = _package(module)
    bound: dict[str, str] = {}        # a local name -> the servewatch module or name it stands for
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("servewatch"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__") and _package(node.module) != mine:
                    found.append(f"{module}:{node.lineno} imports {node.module}.{alias.name}")
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("servewatch"):
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            target = bound.get(node.value.id)
            if target is not None and _package(target) != mine:
                found.append(f"{module}:{node.lineno} uses {target}.{node.attr}")
    return found


def test_no_package_uses_another_packages_private_names():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        found += crossings(path.read_text(encoding="utf-8"), module)
    assert found == []


def test_the_check_can_fail():
    assert crossings("from servewatch.transport.http1 import _Conn\n", "servewatch.proxy.server") == [
        "servewatch.proxy.server:1 imports servewatch.transport.http1._Conn"]
    assert crossings("from servewatch.detectors import ranks\nranks._member_run(1)\n", "servewatch.sources.probe") == [
        "servewatch.sources.probe:2 uses servewatch.detectors.ranks._member_run"]
    # within one package a module may use a sibling's private helper
    assert crossings("from servewatch.detectors import ranks\nranks._member_run(1)\n",
                     "servewatch.detectors.not_serving") == []


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """module -> the servewatch modules it imports anywhere in its source (module-level or inside a function)."""
    graph: dict[str, set[str]] = {m: set() for m in sources}
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("servewatch"):
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    graph[module].add(name if name in sources else node.module)
            elif isinstance(node, ast.Import):
                graph[module].update(a.name for a in node.names if a.name.startswith("servewatch"))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_modules_even_inside_functions():
    sources = {".".join(p.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__"):
               p.read_text(encoding="utf-8") for p in sorted(ROOT.rglob("*.py"))}
    assert cycles(import_graph(sources)) == []


def test_the_cycle_check_can_fail():
    circle = {"servewatch.detectors.a": "from servewatch.detectors import b\n",
              "servewatch.detectors.b": "def f():\n    from servewatch.detectors.a import x\n",
              "servewatch.detectors.c": "from servewatch.detectors import a\n"}
    assert cycles(import_graph(circle)) == [["servewatch.detectors.a", "servewatch.detectors.b"]]


# Engine facts live in their dialect (and the simulator and the lab, which play and start the engines): no engine
# name or metric prefix in code elsewhere. Docstrings and comments may name them; string constants in code may not.
ENGINE_WORDS = re.compile(r"^(vllm|sglang)$|\b(vllm|sglang):|\b(VLLM|sglang)::")
ENGINE_HOMES = ("servewatch/dialects/", "servewatch/sim/", "servewatch/lab/", "servewatch/commands/lab.py")


def engine_strings(source: str, where: str) -> list[str]:
    """String constants in code (not docstrings) that name an engine or one of its metric or process prefixes."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return sorted(f"{where}:{node.lineno} {node.value!r}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and ENGINE_WORDS.search(node.value))


def test_engine_names_and_prefixes_live_in_their_dialect():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        where = str(path.relative_to(ROOT.parent))
        if not where.startswith(ENGINE_HOMES):
            found += engine_strings(path.read_text(encoding="utf-8"), where)
    assert found == []


def test_the_engine_name_check_can_fail():
    assert engine_strings('"""vllm: a docstring may say it"""\nx = "sglang" if "sglang:" in t else "vllm"\n', "m.py") \
        == ["m.py:2 'sglang'", "m.py:2 'sglang:'", "m.py:2 'vllm'"]
    assert engine_strings('n = "VLLM::Worker_TP1"\nm = "vllm:num_requests_running"\n', "m.py") == [
        "m.py:1 'VLLM::Worker_TP1'", "m.py:2 'vllm:num_requests_running'"]


# One name per concept: a public class name is defined once in the package, so that a reader (and an import)
# never has to ask which `Window` or which `Response` is meant.
def class_homes(sources: dict[str, str]) -> dict[str, list[str]]:
    """Public top-level class name -> the modules defining it, for the names defined more than once."""
    homes: dict[str, list[str]] = {}
    for module, source in sorted(sources.items()):
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                homes.setdefault(node.name, []).append(module)
    return {name: modules for name, modules in homes.items() if len(modules) > 1}


def test_a_public_class_name_is_defined_once_in_the_package():
    sources = {".".join(p.relative_to(ROOT.parent).with_suffix("").parts): p.read_text(encoding="utf-8")
               for p in sorted(ROOT.rglob("*.py"))}
    assert class_homes(sources) == {}


def test_the_class_name_check_can_fail():
    assert class_homes({"servewatch.timeline.window": "class Window:\n    pass\n",
                        "servewatch.derive.slo": "class Window:\n    pass\nclass _Private:\n    pass\n",
                        "servewatch.demo.view": "class _Private:\n    pass\n"}) == {
        "Window": ["servewatch.derive.slo", "servewatch.timeline.window"]}


# Commands are wiring: each commands/*.py parses its arguments, calls the package and prints. Process handling
# (signals, a server's start, identity proof, the live table) lives in watch/ and actions/. A command module
# defines no class but an argparse helper (an Action, a HelpFormatter) or its usage error, and stays under a
# line budget: 280 lines, measured on 2026-12-05 when the longest (drill.py, requests.py) had 252 and 249
# lines, guard.py 132 and watch.py 47.
COMMANDS = ROOT / "commands"
COMMAND_LINE_BUDGET = 280
ALLOWED_COMMAND_BASES = re.compile(r"^(argparse\.\w+|\w*Action|\w*HelpFormatter|\w*Error)$")


def command_problems(source: str, where: str, budget: int = COMMAND_LINE_BUDGET) -> list[str]:
    problems = []
    lines = source.count("\n")
    if lines > budget:
        problems.append(f"{where}: {lines} lines, over the {budget}-line budget of a command")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(base) for base in node.bases]
            if not bases or not all(ALLOWED_COMMAND_BASES.match(base) for base in bases):
                problems.append(f"{where}:{node.lineno} class {node.name}({', '.join(bases)}) is not an argparse "
                                f"helper: process handling goes in watch/ or actions/")
    return problems


def test_commands_are_wiring():
    found = []
    for path in sorted(COMMANDS.glob("*.py")):
        found += command_problems(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT.parent)))
    assert found == []


def test_the_commands_check_can_fail():
    assert command_problems("class _StopOnSigterm:\n    pass\n", "c.py") == [
        "c.py:1 class _StopOnSigterm() is not an argparse helper: process handling goes in watch/ or actions/"]
    assert command_problems("import argparse\nclass Keep(argparse.Action):\n    pass\n"
                            "class SimUsageError(ServewatchError):\n    pass\n", "c.py") == []
    assert command_problems("x = 1\n" * 3, "c.py", budget=2) == ["c.py: 3 lines, over the 2-line budget of a command"]


# One HTTP transport (servewatch/transport/): a module that takes another HTTP client (aiohttp's or urllib's)
# says why in a comment at the import, the line above it or on it. aiohttp's server (`from aiohttp import web`)
# is not a client.
OTHER_CLIENT = re.compile(r"^\s*(import aiohttp\b|import urllib\.request\b|from urllib import request\b"
                          r"|from aiohttp import (?!web\b))")


def unexplained_clients(source: str, where: str) -> list[str]:
    lines = source.splitlines()
    found = []
    for number, line in enumerate(lines, 1):
        if OTHER_CLIENT.match(line) and "#" not in line:
            above = number - 2          # up through the import lines just above: one of them may be the comment
            while above >= 0 and lines[above].strip().startswith(("import ", "from ")):
                above -= 1
            if above < 0 or not lines[above].strip().startswith("#"):
                found.append(f"{where}:{number} {line.strip()}")
    return found


def test_another_http_client_says_why_at_its_import():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        where = str(path.relative_to(ROOT.parent))
        if not where.startswith("servewatch/transport/"):
            found += unexplained_clients(path.read_text(encoding="utf-8"), where)
    assert found == []


def test_the_client_check_can_fail():
    assert unexplained_clients("import json\nimport urllib.request\n", "m.py") == ["m.py:2 import urllib.request"]
    assert unexplained_clients("import urllib.error\nimport urllib.request\n", "m.py") == ["m.py:2 import urllib.request"]
    assert unexplained_clients("    # a blocking thread: no event loop\n    import urllib.error\n    import urllib.request\n"
                               "from aiohttp import web\nimport aiohttp  # the benchmark's contender\n", "m.py") == []


# Shared evidence one floor below the verdicts (issue 51): a verdict module (a module of detectors/ that defines a
# top-level `detect...` function) takes what another verdict also reads from detectors/evidence/, never from that
# verdict's module; the evidence floor imports no verdict module either.
DETECTORS = ROOT / "detectors"


def verdict_modules(sources: dict[str, str]) -> set[str]:
    """The verdict modules among `sources` (dotted name -> source): those with a top-level `def detect...`."""
    return {name for name, source in sources.items()
            if any(isinstance(n, ast.FunctionDef) and n.name.startswith("detect") for n in ast.parse(source).body)}


def verdict_crossings(sources: dict[str, str]) -> list[str]:
    """Each import by which a verdict module, or a module of detectors/evidence/, takes another verdict module (at
    module level or inside a function; `from servewatch.detectors import liveness` and `from
    servewatch.detectors.liveness import x` alike)."""
    verdicts = verdict_modules(sources)
    found = []
    for name, source in sorted(sources.items()):
        if name not in verdicts and not name.startswith("servewatch.detectors.evidence"):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name.split(".")[:len(name.split(".")) - node.level]
                    base = ".".join(package + ([base] if base else []))
                taken = [base] + [f"{base}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                taken = [alias.name for alias in node.names]
            else:
                continue
            hit = sorted({v for v in verdicts if v != name and any(t == v or t.startswith(v + ".") for t in taken)})
            if hit:
                found.append(f"{name}:{node.lineno} imports verdict module {', '.join(hit)}")
    return found


def _detector_sources() -> dict[str, str]:
    return {".".join(p.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__"): p.read_text("utf-8")
            for p in sorted(DETECTORS.rglob("*.py"))}


def test_no_verdict_module_imports_another():
    sources = _detector_sources()
    assert {"servewatch.detectors.liveness", "servewatch.detectors.restart"} <= verdict_modules(sources)
    assert verdict_crossings(sources) == []


def test_the_verdict_check_can_fail():
    d = "servewatch.detectors."
    verdict = "def detect(window, config):\n    return []\n"
    sources = {d + "a": verdict, d + "b": verdict + "from servewatch.detectors import a\n",
               d + "c": "def detect_c(w, c):\n    from servewatch.detectors.a import x\n",
               d + "e": "from . import a\nfrom .evidence import y\ndef detect_e(w, c):\n    pass\n",
               d + "evidence.f": "import servewatch.detectors.b\n",
               d + "series": "from servewatch.detectors import a\n"}      # not a verdict: may read one
    assert verdict_crossings(sources) == [
        "servewatch.detectors.b:3 imports verdict module servewatch.detectors.a",
        "servewatch.detectors.c:2 imports verdict module servewatch.detectors.a",
        "servewatch.detectors.e:1 imports verdict module servewatch.detectors.a",
        "servewatch.detectors.evidence.f:1 imports verdict module servewatch.detectors.b"]


# --- one transport contract (issue 51): HTTP clients besides servewatch.transport only where listed, with why ---

HTTP_LIBRARIES = ("aiohttp", "urllib.request", "urllib.error", "http.client", "httpx", "requests")

# (module, what it imports) -> why it may. `aiohttp.web` is aiohttp's server, not a client.
HTTP_IMPORTS_ALLOWED = {
    ("servewatch.serve.app", "aiohttp.web"): "serve's HTTP surface (a server)",
    ("servewatch.serve.http_api", "aiohttp.web"): "serve's HTTP surface (a server)",
    ("servewatch.sim.server", "aiohttp.web"): "the simulator's OpenAI-compatible server",
    ("servewatch.sim.replay_server", "aiohttp.web"): "the replay simulator's server",
    ("servewatch.proxy.telemetry", "aiohttp.web"): "the proxy's telemetry endpoint (a server)",
    ("servewatch.proxy.pair", "aiohttp.web"): "the proxy's prefill/decode pair's server (aiohttp.web server only: "
                                              "both legs' client side is servewatch.transport)",
    ("servewatch.load.aiohttp_client", "aiohttp"): "the contender benchmarks/load_client.py measures the load "
                                                   "generator's own streaming client against (0.55x its CPU)",
    ("servewatch.sim.pd", "aiohttp"): "one request between two simulators on the simulator's own loop",
    ("servewatch.sim.replay", "aiohttp"): "the replay CLI's one control request to its own server",
    ("servewatch.lab.server", "urllib.request"): "the lab's blocking checks of the engine it started",
    ("servewatch.lab.server", "urllib.error"): "the lab's blocking checks of the engine it started",
    ("servewatch.drill.faults.client_abort", "http.client"): "the fault is a client hanging up mid-stream: "
                                                             "a raw connection, left at that moment",
}


def http_imports(source: str, module: str) -> set[tuple[str, str]]:
    """(module, library) for each import of an HTTP client library in `source`, inside functions too."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" if node.module == "aiohttp" and alias.name == "web" else node.module
                     for alias in node.names]
        for name in names:
            library = next((lib for lib in HTTP_LIBRARIES if name == lib or name.startswith(lib + ".")), None)
            if library is not None:
                found.add((module, "aiohttp.web" if name.startswith("aiohttp.web") else library))
    return found


def test_http_clients_are_imported_only_where_allowed():
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        if module.startswith("servewatch.transport"):
            continue                                   # the contract and the client behind it
        found |= http_imports(path.read_text("utf-8"), module)
    assert sorted(found - set(HTTP_IMPORTS_ALLOWED)) == []       # a new client: go through servewatch.transport
    assert sorted(set(HTTP_IMPORTS_ALLOWED) - found) == []       # an allowance no longer used: remove it


def test_the_http_import_check_can_fail():
    source = ("import aiohttp\nfrom aiohttp import web\nimport urllib.request\nfrom urllib.parse import urlsplit\n"
              "def f():\n    import http.client\n    from urllib.error import HTTPError\n")
    assert http_imports(source, "m") == {("m", "aiohttp"), ("m", "aiohttp.web"), ("m", "urllib.request"),
                                         ("m", "http.client"), ("m", "urllib.error")}


# Below the commands, typed options only: argparse (and its namespace) stays in servewatch/cli.py and
# servewatch/commands/; the package below takes dataclasses the commands build. The exceptions are the lab's
# scripts with command lines of their own: tiny_gguf and tiny_model run inside an engine's venv (they cannot import
# servewatch), and the freeze meter runs as a process of its own (`python -m servewatch.lab.freeze`).
ARGPARSE_HOMES = ("servewatch.cli", "servewatch.commands")
ARGPARSE_SCRIPTS = ("servewatch.lab.tiny_gguf", "servewatch.lab.tiny_model", "servewatch.lab.freeze")


def argparse_imports(source: str, module: str) -> list[str]:
    if module in ARGPARSE_SCRIPTS or any(module == home or module.startswith(home + ".") for home in ARGPARSE_HOMES):
        return []
    found = []
    for node in ast.walk(ast.parse(source)):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        found += [f"{module}:{node.lineno} imports argparse" for name in names if name.split(".")[0] == "argparse"]
    return found


def test_argparse_and_its_namespace_stay_in_the_commands():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        source = path.read_text("utf-8")
        found += argparse_imports(source, module) + namespace_readers(source, module)   # namespace_readers: below
    assert found == []
    assert all((ROOT.parent / (name.replace(".", "/") + ".py")).is_file() for name in ARGPARSE_SCRIPTS)


def test_the_argparse_check_can_fail():
    assert argparse_imports("def f():\n    import argparse\n", "servewatch.watch.options") == [
        "servewatch.watch.options:2 imports argparse"]
    assert argparse_imports("from argparse import Namespace\n", "servewatch.proxy.app") == [
        "servewatch.proxy.app:1 imports argparse"]
    assert argparse_imports("import argparse\n", "servewatch.commands.watch") == []
    assert argparse_imports("import argparse\n", "servewatch.lab.tiny_model") == []


# Nor does the namespace travel below the commands untyped: a function there that reads a parameter named as the
# commands name the parsed namespace (`args.url`, `getattr(args, "pid", None)`, `vars(args)`) or adds flags to a
# parser (`parser.add_argument`) is command-line handling, and goes in servewatch/commands/.
NAMESPACE_NAMES = ("args", "namespace", "ns", "parsed_args")


def namespace_readers(source: str, module: str) -> list[str]:
    if module in ARGPARSE_SCRIPTS or any(module == home or module.startswith(home + ".") for home in ARGPARSE_HOMES):
        return []
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        given = function.args
        names = {a.arg for a in (*given.posonlyargs, *given.args, *given.kwonlyargs)} & set(NAMESPACE_NAMES)
        name = getattr(function, "name", "<lambda>")
        for node in ast.walk(function):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names:
                found.append(f"{module}:{node.lineno} {name}() reads {node.value.id}.{node.attr}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "vars")
                  and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in names):
                found.append(f"{module}:{node.lineno} {name}() reads {node.args[0].id} with {node.func.id}()")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("add_argument", "add_argument_group", "add_parser", "parse_args")):
                found.append(f"{module}:{node.lineno} {name}() calls {node.func.attr}()")
    return sorted(set(found))


def test_the_namespace_check_can_fail():
    source = ("def from_args(args):\n    return load(args.config) if getattr(args, 'pid', None) else vars(args)\n"
              "def add(parser):\n    parser.add_argument('--x')\n"
              "def line(args: list):\n    return ' '.join(args)\n"            # a list called args: not a namespace
              "def f(*args):\n    return args.count(1)\n")                    # *args: a tuple, not a parameter read
    assert namespace_readers(source, "servewatch.serve.config") == [
        "servewatch.serve.config:2 from_args() reads args with getattr()",
        "servewatch.serve.config:2 from_args() reads args with vars()",
        "servewatch.serve.config:2 from_args() reads args.config",
        "servewatch.serve.config:4 add() calls add_argument()"]
    assert namespace_readers(source, "servewatch.commands.serve") == []
    assert namespace_readers(source, "servewatch.lab.freeze") == []


# Verdict names outside detectors/ come from the registry: guard's actions and the alert rules name a verdict
# through detectors.registry (ENGINE_DEAD, PROCESS_EXIT, ...), never as a string of their own.
VERDICT_NAME_FREE = ("actions", "derive/rules.py", "watch/guarding.py")


def verdict_literals(source: str, where: str, names) -> list[str]:
    return [f"{where}:{node.lineno} writes the verdict name {node.value!r}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]


def test_verdict_names_come_from_the_registry():
    from servewatch.detectors import registry

    names = set(registry.names())
    assert {registry.ENGINE_DEAD, registry.PROCESS_EXIT, registry.GPU_FAULT, registry.CRASH_LOOP,
            registry.STALL, *registry.ALERT_NAMES} <= names
    found = []
    for place in VERDICT_NAME_FREE:
        for path in sorted([ROOT / place] if place.endswith(".py") else (ROOT / place).rglob("*.py")):
            found += verdict_literals(path.read_text("utf-8"), str(path.relative_to(ROOT.parent)), names)
    assert found == []


def test_the_verdict_name_check_can_fail():
    assert verdict_literals('wait = 10 if verdict == "engine_dead" else 0\n', "p.py", {"engine_dead"}) == [
        "p.py:1 writes the verdict name 'engine_dead'"]
    assert verdict_literals('"""engine_dead: said in words"""\n', "p.py", {"engine_dead"}) == []
