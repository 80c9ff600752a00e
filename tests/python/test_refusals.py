"""Requests refused before their body is read (by the key check, the limiter or the handler) are
answered readably to clients that send the whole body before reading (Python's http.client,
urllib3/requests): the server drains the body (bounded) before answering. Without that, the server's close reaches such a client mid-upload as
`ssl.SSLEOFError` instead of the JSON error that says what was wrong."""
import http.client
import json
import ssl

import pytest

BODY = b"\0" * (4 << 20)


def post(g, path, headers):
    host, port = g.hostport.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=g.cert)
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)
    try:
        conn.request("POST", path, body=BODY, headers=headers)
        r = conn.getresponse()
        body = json.loads(r.read())
        # The connection is still usable: a second request on it is answered.
        conn.request("GET", "/v2/health/live")
        again = conn.getresponse()
        again.read()
        return r.status, body["error"], again.status
    finally:
        conn.close()


@pytest.mark.parametrize("path, key, status, says", [
    ("/v2/models/cls/infer", None, 401, "missing API key"),
    ("/v2/models/cls/infer", "ig_0123456789ab_nope", 401, "invalid"),
    ("/api/models/x/versions", "infer", 403, "'upload'"),
    ("/v1/embeddings", "limited", 429, "rate limit"),
    ("/v1/completions", None, 401, "missing API key"),
    # Refused by the handler itself before it reads the body (ApiError::before_body).
    ("/v2/models/nope/infer", "admin", 404, "nope"),
    ("/api/pipelines/nope/run", "admin", 404, "nope"),
    ("/api/models/bad%20name/versions", "admin", 400, "name"),
])
def test_refused_uploads_read_the_error(gateway, path, key, status, says):
    headers = {}
    if key == "infer":
        headers["X-API-Key"] = gateway.key("infer")
    elif key == "admin":
        headers["X-API-Key"] = gateway.admin_key
    elif key == "limited":
        limited = gateway.key("infer", "--rps", "0.001", "--burst", "1")
        post(gateway, "/v2/models/cls/infer", {"X-API-Key": limited})  # spends the burst: 400
        headers["X-API-Key"] = limited
    elif key:
        headers["Authorization"] = f"Bearer {key}"
    got, error, again = post(gateway, path, headers)
    message = error["message"] if isinstance(error, dict) else error
    assert (got, again) == (status, 200), error
    assert says in message, error
