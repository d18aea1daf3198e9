"""The deployment files in deploy/: the Kubernetes manifests validate against the API schemas
(kubernetes-validate, strict), their probes point at servewatch's livez/readyz for the target the
servewatch container names, the ConfigMap's config and file_sd parse as serve reads them, and the
systemd unit passes `systemd-analyze verify`."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
import yaml

from servewatch.serve import config as serve_config
from servewatch.serve.targets import read_file_sd
from tests.tools import needs_tool

DEPLOY = pathlib.Path(__file__).resolve().parent.parent / "deploy"
K8S_VERSION = "1.33.0"


def documents(name):
    return [doc for doc in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()) if doc]


@pytest.mark.parametrize("name", ["sidecar.yaml", "fleet.yaml", "node-daemonset.yaml", "proxy.yaml"])
def test_manifests_validate_strictly(name):
    import kubernetes_validate   # a test dependency: missing, the test fails
    docs = documents(name)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)     # raises on any schema error


def test_the_node_daemonset_runs_serve_node_as_its_cli_parses_it():
    """The DaemonSet's args are a `serve --node` the CLI accepts (node name from the downward API), on the port
    Prometheus is told to scrape, in the host's PID namespace."""
    from servewatch.cli import build_parser
    from servewatch.commands.serve import config_from_args
    from servewatch.serve.config import parse_listen

    pod = documents("node-daemonset.yaml")[0]["spec"]["template"]
    spec = pod["spec"]
    [container] = spec["containers"]
    args = [a.replace("$(NODE_NAME)", "gpu-node-7") for a in container["args"]]
    config = config_from_args(build_parser().parse_args(args))
    assert config.node == "gpu-node-7" and not config.targets
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container["env"]
    assert spec["hostPID"] is True
    assert str(parse_listen(config.listen)[1]) == pod["metadata"]["annotations"]["prometheus.io/port"]


def test_sidecar_probes_point_at_the_named_target():
    from servewatch.serve.config import parse_listen, target_from_arg

    pod = documents("sidecar.yaml")[0]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    args = containers["servewatch"]["args"]
    target = target_from_arg(args[args.index("--target") + 1])
    _, port = parse_listen(args[args.index("--listen") + 1])
    vllm = containers["vllm"]
    assert vllm["livenessProbe"]["httpGet"] == {"path": f"/targets/{target.name}/livez", "port": port}
    assert vllm["readinessProbe"]["httpGet"] == {"path": f"/targets/{target.name}/readyz", "port": port}
    startup = vllm["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600     # model loading and compile


def test_the_service_reaches_the_engine_only_through_the_proxy(tmp_path):
    from servewatch.serve.config import parse_listen

    config_map, deployment, service = documents("proxy.yaml")
    (tmp_path / "serve.yaml").write_text(config_map["data"]["serve.yaml"])
    [target] = serve_config.load(str(tmp_path / "serve.yaml")).targets
    pod = deployment["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    sw, vllm = containers["servewatch"], containers["vllm"]
    # serve reads the ConfigMap where it is mounted
    config_path = sw["args"][sw["args"].index("--config") + 1]
    mount = next(m for m in sw["volumeMounts"] if config_path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    # the proxy forwards to the pod's vLLM and listens on the port the Service sends clients to
    engine_port = vllm["args"][vllm["args"].index("--port") + 1]
    assert target.url == f"http://127.0.0.1:{engine_port}"
    _, proxy_port = parse_listen(target.proxy.listen)
    ports = {p["name"]: p["containerPort"] for p in sw["ports"]}
    [service_port] = service["spec"]["ports"]
    assert ports[service_port["targetPort"]] == proxy_port
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    assert int(engine_port) not in {p.get("targetPort") for p in service["spec"]["ports"]}
    # records and bundles on the pod's volume; probes on the named target
    data = next(m["mountPath"] for m in sw["volumeMounts"] if m["name"] == "data")
    assert target.proxy.records.startswith(data + "/")
    # the tenant hash's key from a Secret of the user's, mounted read-only where the config says
    key_mount = next(m for m in sw["volumeMounts"] if target.proxy.tenant_key_file.startswith(m["mountPath"] + "/"))
    key_volume = next(v for v in pod["volumes"] if v["name"] == key_mount["name"])
    assert key_mount["readOnly"] is True and key_volume["secret"]["secretName"]
    assert target.proxy.tenant_key_file.endswith("/tenant.key")
    _, serve_port = parse_listen(serve_config.load(str(tmp_path / "serve.yaml")).listen)
    assert vllm["livenessProbe"]["httpGet"] == {"path": f"/targets/{target.name}/livez", "port": serve_port}
    assert vllm["readinessProbe"]["httpGet"] == {"path": f"/targets/{target.name}/readyz", "port": serve_port}


def test_fleet_configmap_is_what_serve_reads(tmp_path):
    config_map = documents("fleet.yaml")[0]
    (tmp_path / "serve.yaml").write_text(config_map["data"]["serve.yaml"])
    (tmp_path / "targets.json").write_text(config_map["data"]["targets.json"])
    cfg = serve_config.load(str(tmp_path / "serve.yaml"))
    assert cfg.file_sd == ("/etc/servewatch/targets.json",) and cfg.listen == "0.0.0.0:9464"
    assert len(read_file_sd(str(tmp_path / "targets.json"))) == 3
    example = serve_config.load(str(DEPLOY / "serve.example.yaml"))
    assert [t.name for t in example.targets] == ["llama-a"]


@needs_tool("systemd-analyze")
def test_systemd_unit_verifies(tmp_path):
    unit = (DEPLOY / "systemd" / "servewatch.service").read_text()
    assert "ExecStart=/usr/local/bin/servewatch serve --config" in unit
    # verify checks that the binary exists: point it at this interpreter for the check
    local = tmp_path / "servewatch.service"
    local.write_text(unit.replace("/usr/local/bin/servewatch", f"{sys.executable} -m servewatch"))
    result = subprocess.run(["systemd-analyze", "verify", str(local)], capture_output=True, text=True, timeout=60)
    problems = [line for line in result.stderr.splitlines() if "servewatch.service" in line]
    assert result.returncode == 0 and not problems, result.stderr
