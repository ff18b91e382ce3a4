"""Sample 09: a web app — Deployment, Service and HorizontalPodAutoscaler — from one ConfigMap.

Plain Python over dicts with enoki_sdk; built into a wasi:cli/command component by
componentize-py (see README.md). `synthesize` is also importable and testable under CPython.
"""

from enoki_sdk import SynthesisError, label, main, readiness, readiness_group, resource


def _int(data: dict, key: str, default: int) -> int:
    raw = data.get(key, str(default))
    try:
        return int(raw)
    except ValueError:
        raise SynthesisError(f"ConfigMap data.{key}: {raw!r} is not an integer") from None


def synthesize(rl):
    cfg = rl.input("config")
    data = cfg.get("data") or {}
    app = data.get("app") or cfg["metadata"]["name"]
    image = data.get("image")
    if not image:
        raise SynthesisError("ConfigMap data.image is required")
    port = _int(data, "port", 8080)
    min_replicas = _int(data, "minReplicas", 1)
    max_replicas = _int(data, "maxReplicas", max(min_replicas, 3))
    if max_replicas < min_replicas:
        raise SynthesisError(f"ConfigMap data.maxReplicas ({max_replicas}) is below minReplicas ({min_replicas})")
    selector = {"app.kubernetes.io/name": app}

    deployment = resource(
        "apps/v1", "Deployment", app,
        spec={
            "replicas": min_replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": dict(selector)},
                "spec": {"containers": [{
                    "name": app,
                    "image": image,
                    "ports": [{"name": "http", "containerPort": port}],
                    "resources": {"requests": {"cpu": data.get("cpu", "100m"), "memory": data.get("memory", "128Mi")}},
                }]},
            },
        },
    )
    service = resource(
        "v1", "Service", app,
        spec={"selector": dict(selector), "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    )
    hpa = resource(
        "autoscaling/v2", "HorizontalPodAutoscaler", app,
        spec={
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": _int(data, "cpuTarget", 70)}}}],
        },
    )
    for obj in (deployment, service, hpa):
        label(obj, "app.kubernetes.io/name", app)
        label(obj, "app.kubernetes.io/managed-by", "enoki")
    # The Deployment first; the Service and the autoscaler once it exists.
    readiness_group(deployment, 0)
    readiness(service, "has(self.spec.clusterIP)")
    readiness_group(service, 1)
    readiness_group(hpa, 1)
    return [deployment, service, hpa]


class Run:
    """The `wasi:cli/run` export componentize-py wires to the component's entry point."""

    def run(self) -> None:
        main(synthesize)
