"""/metrics parsed with the real Prometheus client library's OpenMetrics parser, after traffic
of known shape: successes, a client error and a rate-limited request."""
import json
import re
import ssl
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from conftest import start


@pytest.fixture(scope="module")
def metered():
    g = start([("cls", "ocr-cls.onnx")], extra_args=["--metrics-listen", "127.0.0.1:0"])
    yield g
    g.stop()


def get(g, url, key=None):
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    ctx = ssl.create_default_context(cafile=g.cert) if url.startswith("https") else None
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams, family, name, **labels):
    found = [s.value for s in fams[family].samples
             if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, fams[family].samples)
    return found[0]


def test_metrics_parse_and_count_requests(metered):
    g = metered
    c = httpclient.InferenceServerClient(
        url=g.hostport, ssl=True,
        ssl_context_factory=lambda: ssl.create_default_context(cafile=g.cert))
    key = g.key("infer")
    x = httpclient.InferInput("x", [1, 3, 48, 192], "FP32")
    x.set_data_from_numpy(np.zeros((1, 3, 48, 192), np.float32))
    for _ in range(3):
        c.infer("cls", [x], headers={"Authorization": f"Bearer {key}"})
    bad = httpclient.InferInput("x", [1, 3, 48, 192], "INT64")
    bad.set_data_from_numpy(np.zeros((1, 3, 48, 192), np.int64))
    with pytest.raises(InferenceServerException):
        c.infer("cls", [bad], headers={"Authorization": f"Bearer {key}"})
    limited = g.key("infer", "--rps", "0.001", "--burst", "1")
    limited_id = limited.split("_")[1]
    assert get(g, f"{g.url}/api/whoami", limited)[0] == 200
    status, headers, _ = get(g, f"{g.url}/api/whoami", limited)
    assert status == 429 and int(headers["Retry-After"]) >= 1

    status, headers, text = get(g, f"{g.url}/metrics", g.admin_key)
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    fams = families(text)

    assert fams["infergate_request_duration_seconds"].type == "histogram"
    ok = dict(model="cls", version="1", protocol="kserve_http", status="200")
    assert sample(fams, "infergate_request_duration_seconds", "infergate_request_duration_seconds_count", **ok) == 3
    assert sample(fams, "infergate_request_duration_seconds", "infergate_request_duration_seconds_bucket",
                  le="+Inf", **ok) == 3
    assert sample(fams, "infergate_request_duration_seconds", "infergate_request_duration_seconds_sum", **ok) > 0
    assert sample(fams, "infergate_inference_requests", "infergate_inference_requests_total",
                  model="cls", status="400") == 1
    # Engine counters in Triton's shape, and the loaded-model gauge.
    assert sample(fams, "infergate_inference_request_success", "infergate_inference_request_success_total",
                  model="cls", version="1") == 3
    assert sample(fams, "infergate_queue_duration_seconds", "infergate_queue_duration_seconds_total",
                  model="cls", version="1") >= 0
    assert sample(fams, "infergate_model_loaded", "infergate_model_loaded", model="cls", version="1") == 1
    # Three sequential single-sample requests: three executions of batch size 1.
    assert fams["infergate_batch_size"].type == "histogram"
    one = dict(model="cls", version="1")
    assert sample(fams, "infergate_batch_size", "infergate_batch_size_count", **one) == 3
    assert sample(fams, "infergate_batch_size", "infergate_batch_size_sum", **one) == 3
    assert sample(fams, "infergate_batch_size", "infergate_batch_size_bucket", le="1.0", **one) == 3
    assert sample(fams, "infergate_batch_size", "infergate_batch_size_bucket", le="+Inf", **one) == 3
    assert sample(fams, "infergate_host_memory_reserved_bytes", "infergate_host_memory_reserved_bytes") > 0
    # The limiter's refusal, by the key's numeric id.
    status, _, usage = get(g, f"{g.url}/api/keys/{limited_id}/usage", g.admin_key)
    assert status == 200
    key_id = str(json.loads(usage)["key_id"])
    assert sample(fams, "infergate_rate_limited_requests", "infergate_rate_limited_requests_total",
                  key_id=key_id, reason="rate") == 1
    assert sample(fams, "infergate_http_requests", "infergate_http_requests_total",
                  method="GET", route="/api/whoami", status="429") == 1


def test_metrics_need_an_admin_key_except_on_the_private_listener(metered):
    g = metered
    assert get(g, f"{g.url}/metrics")[0] == 401
    assert get(g, f"{g.url}/metrics", g.key("infer"))[0] == 403
    line = next(l for l in g.startup_log if "metrics (no key) on" in l)
    url = re.search(r"(http://\S+/metrics)", re.sub(r"\x1b\[[0-9;]*m", "", line)).group(1)
    status, _, text = get(g, url)
    assert status == 200
    assert "infergate_request_duration_seconds" in families(text)
