"""HTTPS to a manager on the test network. The manager's self-signed certificate names
`localhost` (not its test address): the chain is checked against it and the name is checked as
`localhost`, so nothing is trusted blindly. Standard library only: the load client runs it too."""
import http.client
import json
import ssl

# The name the manager's self-signed certificate carries.
CERT_NAME = "localhost"


class ManagerConnection(http.client.HTTPSConnection):
    """A kept-alive HTTPS connection to `host:port`, checked against the CA file `ca` (or the
    PEM text `ca_pem`) and the certificate name `name`."""

    def __init__(self, host, port, ca, timeout, name=CERT_NAME, ca_pem=None):
        context = ssl.create_default_context(cafile=ca, cadata=ca_pem)
        self.name = name
        super().__init__(host, port, timeout=timeout, context=context)

    def connect(self):
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.name)


def identity_body(rid, values, input_name="x", output_name="y"):
    """A KServe v2 request of an identity model on FP32 [1, len(values)]."""
    return {"id": rid, "inputs": [{"name": input_name, "shape": [1, len(values)], "datatype": "FP32", "data": values}],
            "outputs": [{"name": output_name}]}


def request(conn, method, path, key=None, body=None, headers=None):
    """One exchange on `conn`: (status, headers, body bytes)."""
    sent = dict(headers or {})
    if key:
        sent["Authorization"] = f"Bearer {key}"
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
        sent["Content-Type"] = "application/json"
    conn.request(method, path, body=body, headers=sent)
    resp = conn.getresponse()
    return resp.status, dict(resp.getheaders()), resp.read()


def get_json(host, port, ca, path, key, timeout=10):
    """GET `path` on a fresh connection: the decoded JSON (an error status raises)."""
    conn = ManagerConnection(host, port, ca, timeout)
    try:
        status, _, body = request(conn, "GET", path, key=key)
    finally:
        conn.close()
    if status != 200:
        raise RuntimeError(f"GET {path}: {status} {body[:200]!r}")
    return json.loads(body)
