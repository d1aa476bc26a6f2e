"""deploy/kubernetes/, validated offline: every manifest against the Kubernetes API's own schemas
(the `kubernetes-validate` package bundles them; strict, so an unknown or misspelt field fails),
the toolgate configuration each ConfigMap carries loaded by `toolgate check-config`, and the
promises of docs/guides/kubernetes.md read off the resources: probes on /healthz and /readyz,
non-root with a numeric user, a read-only root file system with a writable volume wherever
toolgate writes, resources, secrets from the Secret the guide creates.

ServiceMonitor and PrometheusRule are Prometheus Operator resources (CRDs): kubernetes-validate
has no schema for them, so their shape is checked here instead: the ServiceMonitor selects the
Service and names its metrics port, and the PrometheusRule's `spec.groups` equal the `groups` of
conf/prometheus/alerts.yml (the rules that `promtool test rules` checks), so the two cannot
drift apart.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import yaml

from toolgate_harness import ROOT, toolgate_bin

DEPLOY = ROOT / "deploy" / "kubernetes"
GUIDE = ROOT / "docs" / "guides" / "kubernetes.md"
# The oldest Kubernetes the manifests are written for (preStop's `sleep` action is 1.30's).
KUBERNETES = "1.30.0"
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}


def resources(variant: str) -> list[dict]:
    docs = []
    for path in sorted((DEPLOY / variant).glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs, f"no manifests in deploy/kubernetes/{variant}"
    return docs


def by_kind(docs: list[dict]) -> dict[str, dict]:
    kinds = {}
    for d in docs:
        assert d["kind"] not in kinds, f"two {d['kind']} resources"
        kinds[d["kind"]] = d
    return kinds


def validate_core(docs: list[dict]) -> None:
    for d in docs:
        if (d["apiVersion"], d["kind"]) in CRDS:
            continue
        try:
            kubernetes_validate.validate(d, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            raise AssertionError(f"{d['kind']}/{d['metadata']['name']}: {path}: {e.message}") from None


def secret_keys_in_guide() -> list[set[str]]:
    """The keys of the Secret `toolgate` that each `kubectl create secret` of the guide makes."""
    commands = re.findall(r"kubectl create secret generic toolgate((?:.*\\\n)*.*)", GUIDE.read_text())
    assert commands, "docs/guides/kubernetes.md has no `kubectl create secret generic toolgate`"
    return [set(re.findall(r"--from-literal=([a-z-]+)=", c)) for c in commands]


def check_config(config: str, tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / "toolgate.yaml"
    path.write_text(config)
    run = subprocess.run([str(toolgate_bin()), "check-config", str(path)], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=60)
    assert run.returncode == 0, f"check-config refused the ConfigMap's toolgate.yaml:\n{run.stdout}{run.stderr}"


def pod_promises(workload: dict, writes_to: set[str]) -> None:
    pod = workload["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001, "the Dockerfile's numeric user"
    assert pod["automountServiceAccountToken"] is False
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, sc
    assert sc["capabilities"]["drop"] == ["ALL"], sc
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert writes_to <= {p for p, m in mounts.items() if not m.get("readOnly")}, (writes_to, mounts)
    assert mounts["/etc/toolgate"]["readOnly"] is True
    assert container["args"] == ["--config", "/etc/toolgate/toolgate.yaml"]
    for probe, path in [("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")]:
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}, (probe, container[probe])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8080, "metrics": 9090}, ports
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) == {"cpu", "memory"}, container["resources"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert all(r["name"] == "toolgate" for r in refs.values()), refs
    # The keys it reads are those one of the guide's `kubectl create secret` makes.
    assert {r["key"] for r in refs.values()} in secret_keys_in_guide(), (refs, secret_keys_in_guide())
    assert "optional" not in refs["TOOLGATE_SECRET_KEY"], "the master key is required"
    # Above the grace period of the calls in flight (and the preStop wait, the apps' stop).
    assert pod["terminationGracePeriodSeconds"] > 20 + 5 + 5


def config_of(kinds: dict[str, dict]) -> dict:
    return yaml.safe_load(kinds["ConfigMap"]["data"]["toolgate.yaml"])


def service_promises(kinds: dict[str, dict]) -> None:
    service, workload = kinds["Service"], kinds.get("Deployment") or kinds["StatefulSet"]
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items(), "the Service selects the pods"
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {"http": "http", "metrics": "metrics"}
    config = config_of(kinds)
    assert config["server"]["listen"].endswith(":8080") and config["server"]["metrics_listen"] == "0.0.0.0:9090"


def test_the_single_instance_manifests_are_valid_and_keep_the_store_on_a_volume(tmp_path):
    docs = resources("single")
    validate_core(docs)
    kinds = by_kind(docs)
    assert set(kinds) == {"ConfigMap", "StatefulSet", "Service"}, set(kinds)
    sts = kinds["StatefulSet"]
    assert sts["spec"]["replicas"] == 1, "the embedded store is one process's"
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    config = config_of(kinds)
    assert config["storage"] == {"backend": "embedded", "path": "/var/lib/toolgate"}, config["storage"]
    data_mount = [m for m in sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
                  if m["name"] == claim["metadata"]["name"]]
    assert [m["mountPath"] for m in data_mount] == ["/var/lib/toolgate"], "the claim holds the store"
    assert sts["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 10001, "the volume is writable"
    pod_promises(sts, {"/var/lib/toolgate", "/tmp"})
    service_promises(kinds)
    check_config(kinds["ConfigMap"]["data"]["toolgate.yaml"], tmp_path, {})


def test_the_redis_manifests_are_valid_and_scale_drain_and_alert(tmp_path):
    docs = resources("redis")
    validate_core(docs)
    kinds = by_kind(docs)
    assert set(kinds) == {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                          "ServiceMonitor", "PrometheusRule", "NetworkPolicy"}, set(kinds)
    deployment = kinds["Deployment"]
    config = config_of(kinds)
    assert config["storage"]["backend"] == "redis" and config["storage"]["url_env"] == "TOOLGATE_REDIS_URL"
    assert "url" not in config["storage"], "the Redis URL (its password) comes from the Secret"
    pod_promises(deployment, {"/tmp"})
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"]}["TOOLGATE_REDIS_URL"] == \
        "redis-url"
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}
    service_promises(kinds)
    # The autoscaler and the budget act on these pods, and keep the budget satisfiable.
    hpa, pdb = kinds["HorizontalPodAutoscaler"], kinds["PodDisruptionBudget"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "toolgate"}
    assert hpa["spec"]["minReplicas"] >= 2 and pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    policy = kinds["NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == {"http", "metrics"}
    # The CRDs, by shape: the ServiceMonitor scrapes the Service's metrics port ...
    monitor = kinds["ServiceMonitor"]
    assert set(monitor["spec"]) == {"selector", "endpoints"}, monitor["spec"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= kinds["Service"]["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    # ... and the PrometheusRule is conf/prometheus/alerts.yml, whose ToolgateDown reads the job
    # label Prometheus gives a ServiceMonitor's targets: the Service's name.
    rule = kinds["PrometheusRule"]
    alerts = yaml.safe_load((ROOT / "conf" / "prometheus" / "alerts.yml").read_text())
    assert set(rule["spec"]) == {"groups"} and rule["spec"]["groups"] == alerts["groups"], \
        "deploy/kubernetes/redis/prometheusrule.yaml differs from conf/prometheus/alerts.yml: remake it (its header)"
    assert 'up{job="%s"}' % kinds["Service"]["metadata"]["name"] in str(alerts)
    for r in (monitor, rule):
        assert r["metadata"]["labels"]["release"] == "kube-prometheus-stack", r["metadata"]
    # The ConfigMap's file, loaded with the variable the Deployment sets from the Secret.
    check_config(kinds["ConfigMap"]["data"]["toolgate.yaml"], tmp_path,
                 {"TOOLGATE_REDIS_URL": "redis://:secret@redis.toolgate.svc:6379/0"})


def test_a_manifest_with_a_misspelt_field_fails_the_validation():
    """The validation is strict: it would catch a misspelt field, not just a missing one."""
    (deployment,) = [d for d in resources("redis") if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    try:
        validate_core([deployment])
    except AssertionError as e:
        assert "readinesProbe" in str(e), e
    else:
        raise AssertionError("a misspelt field passed the validation")
