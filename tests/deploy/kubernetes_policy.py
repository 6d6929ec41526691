"""The rules every object under deploy/kubernetes/ is held to, as functions over rendered objects.

Each rule returns the violations it finds, one readable line each; tests/deploy/test_kubernetes.py
runs them over every overlay (none may be found) and over manifests broken on purpose (each rule
must find its own). No policy engine is installed for this: the rules are few and elicitd's own
(its probes, its stop sequence, its secrets), which a generic engine would not know.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from service.services import BACKGROUND_STOP_SECONDS, SHUTDOWN_SECONDS
from service.serving import drain_seconds

Obj = dict[str, Any]
Rule = Callable[[list[Obj]], list[str]]

WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"}
LONG_RUNNING = {"Deployment", "StatefulSet", "DaemonSet"}
# The kinds kubernetes-validate has no schema for (Prometheus Operator CRDs): their shape is
# checked here instead.
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}


def name(obj: Obj) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def pod_spec(obj: Obj) -> Obj | None:
    if obj["kind"] == "CronJob":
        spec: Obj = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        return spec
    if obj["kind"] in WORKLOADS:
        template: Obj = obj["spec"]["template"]
        return template["spec"]  # type: ignore[no-any-return]
    return None


def containers(obj: Obj) -> Iterator[Obj]:
    spec = pod_spec(obj)
    if spec is not None:
        yield from spec.get("initContainers", [])
        yield from spec["containers"]


def find(objects: list[Obj], kind: str, obj_name: str) -> Obj:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == obj_name]
    return found


def env_config(objects: list[Obj]) -> dict[str, str]:
    """The elicitd-env ConfigMap (its generated name carries a hash)."""
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("elicitd-env")]
    data: dict[str, str] = config["data"]
    return data


def security(objects: list[Obj]) -> list[str]:
    found = []
    for obj in objects:
        spec = pod_spec(obj)
        if spec is None:
            continue
        pod = spec.get("securityContext", {})
        if spec.get("automountServiceAccountToken") is not False:
            found.append(f"{name(obj)}: the service-account token is mounted")
        if pod.get("runAsNonRoot") is not True:
            found.append(f"{name(obj)}: the pod may run as root (runAsNonRoot)")
        if pod.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            found.append(f"{name(obj)}: no RuntimeDefault seccomp profile")
        if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
            found.append(f"{name(obj)}: shares a host namespace")
        for container in containers(obj):
            context = container.get("securityContext", {})
            where = f"{name(obj)} container {container['name']}"
            if context.get("allowPrivilegeEscalation") is not False:
                found.append(f"{where}: privilege escalation allowed")
            if context.get("privileged"):
                found.append(f"{where}: privileged")
            if context.get("readOnlyRootFilesystem") is not True:
                found.append(f"{where}: writable root filesystem")
            if context.get("capabilities", {}).get("drop") != ["ALL"] or context.get("capabilities", {}).get("add"):
                found.append(f"{where}: capabilities not all dropped")
            if context.get("runAsUser") == 0 or pod.get("runAsUser") == 0:
                found.append(f"{where}: runs as uid 0")
    return found


def probes(objects: list[Obj]) -> list[str]:
    found = []
    for obj in objects:
        if obj["kind"] not in LONG_RUNNING:
            continue
        for container in containers(obj):
            where = f"{name(obj)} container {container['name']}"
            for probe in ("readinessProbe", "livenessProbe"):
                if probe not in container:
                    found.append(f"{where}: no {probe}")
            if container["name"] == "elicitd":
                paths = {p: container.get(p, {}).get("httpGet", {}).get("path") for p in _ELICITD_PROBES}
                if paths != _ELICITD_PROBES:
                    found.append(f"{where}: probes are {paths}, not {_ELICITD_PROBES}")
    return found


# Liveness never asks about PostgreSQL or Redis: an outage of either must not restart every pod.
_ELICITD_PROBES = {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}


def resources(objects: list[Obj]) -> list[str]:
    found = []
    for obj in objects:
        for container in containers(obj):
            given = container.get("resources", {})
            for part in ("requests", "limits"):
                for resource in ("cpu", "memory"):
                    if resource not in given.get(part, {}):
                        found.append(f"{name(obj)} container {container['name']}: no {resource} in {part}")
    return found


def disruption_budgets(objects: list[Obj]) -> list[str]:
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    found = []
    for obj in objects:
        if obj["kind"] not in {"Deployment", "StatefulSet"}:
            continue
        labels = obj["spec"]["template"]["metadata"]["labels"]
        covered = any(
            all(labels.get(k) == v for k, v in budget["spec"]["selector"]["matchLabels"].items()) for budget in budgets
        )
        replicas = obj["spec"].get("replicas", 2)  # none: an autoscaler owns it
        if replicas > 1 and not covered:
            found.append(f"{name(obj)}: {replicas} replicas and no PodDisruptionBudget selecting them")
        if obj["metadata"]["name"] == "elicitd" and not covered:
            found.append(f"{name(obj)}: no PodDisruptionBudget")
    return found


def images(objects: list[Obj]) -> list[str]:
    found = []
    for obj in objects:
        for container in containers(obj):
            image = container["image"]
            tag = image.rsplit("/", 1)[-1]
            if "@sha256:" in image:
                continue
            if ":" not in tag or tag.endswith(":latest"):
                found.append(f"{name(obj)} container {container['name']}: image {image} has no pinned tag")
    return found


# Values that are secrets wherever they appear: an elicitd key ring entry, a password in a URL,
# a PEM key, a Stripe key; and names that say a value is one.
_SECRET_VALUES = [
    re.compile(r"\b[A-Za-z0-9_.-]+:[A-Za-z0-9_-]{43}\b"),
    re.compile(r"://[^/\s:@]*:[^/\s@]+@"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\b[sr]k_(live|test)_[A-Za-z0-9]+"),
]
_SECRET_NAMES = re.compile(r"(SECRET|PASSWORD|TOKEN|_KEYS?$|PRIVATE|DATABASE_URL|REDIS_URL)", re.IGNORECASE)


def secrets_in_config_maps(objects: list[Obj]) -> list[str]:
    found = []
    for obj in objects:
        if obj["kind"] != "ConfigMap":
            continue
        for key, value in obj.get("data", {}).items():
            if _SECRET_NAMES.search(key):
                found.append(f"{name(obj)}: key {key} names a secret")
            if any(pattern.search(value) for pattern in _SECRET_VALUES):
                found.append(f"{name(obj)}: key {key} holds a secret value")
    return found


def service_links(objects: list[Obj]) -> list[str]:
    """A Service named elicitd makes Kubernetes set ELICITD_PORT=tcp://… in every pod of the
    namespace unless service links are off, and ``elicitd serve`` reads ELICITD_PORT."""
    found = []
    for obj in objects:
        spec = pod_spec(obj)
        if spec is not None and spec.get("enableServiceLinks") is not False:
            found.append(f"{name(obj)}: service links on (ELICITD_* variables from Services)")
    return found


def stop_sequence(objects: list[Obj]) -> list[str]:
    """The grace period covers the preStop pause, the longest long-poll (with the margin to answer
    it), then the app's shutdown."""
    deployment = find(objects, "Deployment", "elicitd")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "elicitd"]
    pause = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    longest = int(env_config(objects)["ELICITD_MAX_WAIT_SECONDS"])
    # SIGTERM comes after the pause; uvicorn then waits at most drain_seconds for the requests it
    # holds (event streams end at once), then the app's background tasks and connections stop.
    needed = pause + drain_seconds(longest) + BACKGROUND_STOP_SECONDS + SHUTDOWN_SECONDS
    grace = spec.get("terminationGracePeriodSeconds", 30)
    found = []
    if pause < 5:
        found.append(f"{name(deployment)}: preStop pause {pause} s leaves no time for endpoints to forget the pod")
    if grace < needed:
        found.append(f"{name(deployment)}: grace {grace} s < preStop {pause} + long-poll {longest} + shutdown")
    return found


def rollout(objects: list[Obj]) -> list[str]:
    """The migration Job runs `elicitd migrate` with the Deployment's image, before it rolls; the
    Deployment never drops below its replica count while the new pods wait for the schema."""
    deployment = find(objects, "Deployment", "elicitd")
    job = find(objects, "Job", "elicitd-migrate")
    (server,) = deployment["spec"]["template"]["spec"]["containers"]
    (migrate,) = job["spec"]["template"]["spec"]["containers"]
    found = []
    if migrate["command"][:2] != ["elicitd", "migrate"]:
        found.append(f"{name(job)}: runs {migrate['command']}, not elicitd migrate")
    if migrate["image"] != server["image"]:
        found.append(f"{name(job)}: image {migrate['image']} is not the Deployment's {server['image']}")
    annotations = job["metadata"].get("annotations", {})
    if annotations.get("argocd.argoproj.io/hook") != "PreSync":
        found.append(f"{name(job)}: not an Argo CD PreSync hook")
    if deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] != 0:
        found.append(f"{name(deployment)}: a rollout may take replicas away before new ones are ready")
    autoscalers = [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
    if autoscalers and "replicas" in deployment["spec"]:
        found.append(f"{name(deployment)}: sets replicas although an autoscaler owns them")
    return found


def network(objects: list[Obj]) -> list[str]:
    """Default deny, and elicitd reachable only from the ingress controller and monitoring (and, in
    an overlay without an ingress controller, from its own namespace)."""
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    found = []
    if not any(
        p["spec"]["podSelector"] == {} and set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"} for p in policies
    ):
        found.append("no default-deny NetworkPolicy")
    elicitd = [p for p in policies if p["metadata"]["name"] == "elicitd"]
    if not elicitd:
        return [*found, "no NetworkPolicy for elicitd"]
    sources = [peer for rule in elicitd[0]["spec"].get("ingress", []) for peer in rule.get("from", [{}])]
    has_ingress = any(o["kind"] == "Ingress" for o in objects)
    for peer in sources:
        namespace = peer.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name")
        if has_ingress and namespace not in {"ingress-nginx", "monitoring"}:
            found.append(f"NetworkPolicy/elicitd: ingress from {peer}")
        if "ipBlock" in peer:
            found.append(f"NetworkPolicy/elicitd: ingress from an address block {peer['ipBlock']}")
    egress_ports = {p["port"] for rule in elicitd[0]["spec"].get("egress", []) for p in rule.get("ports", [])}
    if not {53, 443} <= egress_ports:
        found.append(f"NetworkPolicy/elicitd: egress ports {sorted(map(str, egress_ports))} miss DNS or HTTPS")
    return found


def ingress(objects: list[Obj]) -> list[str]:
    """The Ingress serves the public URL's host, outlasts the longest long-poll, and keeps /metrics in."""
    found = []
    public = urlsplit(env_config(objects)["ELICITD_PUBLIC_URL"]).hostname
    longest = int(env_config(objects)["ELICITD_MAX_WAIT_SECONDS"])
    for obj in objects:
        if obj["kind"] != "Ingress":
            continue
        hosts = {rule["host"] for rule in obj["spec"]["rules"]}
        if hosts != {public}:
            found.append(f"{name(obj)}: hosts {sorted(hosts)} are not the public URL's {public}")
        timeout = int(obj["metadata"].get("annotations", {}).get("nginx.ingress.kubernetes.io/proxy-read-timeout", 60))
        if timeout <= longest:
            found.append(f"{name(obj)}: proxy read timeout {timeout} s cuts long-polls of {longest} s")
    paths = [
        p["path"] for o in objects if o["kind"] == "Ingress" for r in o["spec"]["rules"] for p in r["http"]["paths"]
    ]
    if paths and "/metrics" not in paths:
        found.append("Ingress: /metrics is served to the internet")
    return found


def custom_resources(objects: list[Obj]) -> list[str]:
    """The shape of the Prometheus Operator objects, which no bundled schema checks."""
    found = []
    for obj in objects:
        if obj["kind"] == "ServiceMonitor":
            if obj["apiVersion"] != "monitoring.coreos.com/v1" or not obj["spec"]["endpoints"]:
                found.append(f"{name(obj)}: not a monitoring.coreos.com/v1 ServiceMonitor with endpoints")
            if any(e.get("path") != "/metrics" for e in obj["spec"]["endpoints"]):
                found.append(f"{name(obj)}: scrapes something other than /metrics")
        if obj["kind"] == "PrometheusRule":
            rules = [rule for group in obj["spec"]["groups"] for rule in group["rules"]]
            if any(not {"alert", "expr", "labels"} <= set(rule) for rule in rules):
                found.append(f"{name(obj)}: a rule without alert, expr or labels")
            exprs = " ".join(rule["expr"] for rule in rules)
            for metric in _ALERTED:
                if metric not in exprs:
                    found.append(f"{name(obj)}: no alert on {metric}")
    return found


# Readiness, refresh failures, the webhook backlog and loop stalls (docs/deploy.md#monitoring).
_ALERTED = (
    "kube_deployment_status_replicas_available",
    "elicitd_token_refreshes_total",
    "elicitd_webhook_backlog",
    "elicitd_event_loop_stall_max_seconds",
)

RULES: dict[str, Rule] = {
    "security": security,
    "probes": probes,
    "resources": resources,
    "disruption_budgets": disruption_budgets,
    "images": images,
    "secrets_in_config_maps": secrets_in_config_maps,
    "service_links": service_links,
    "stop_sequence": stop_sequence,
    "rollout": rollout,
    "network": network,
    "ingress": ingress,
    "custom_resources": custom_resources,
}
