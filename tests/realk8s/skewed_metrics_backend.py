"""A stand-in metrics-server for tests/realk8s/test_clock_aggregated_api.py: HTTPS on HOST:PORT,
serving metrics.k8s.io's discovery and empty NodeMetrics / PodMetrics lists. Run under
libfaketime, it is a metrics-server on a node whose clock is off: the ``Date`` of its answers is
its own clock (as a Go server's is), and kube-apiserver's aggregator passes that ``Date`` through.

Usage: ``python skewed_metrics_backend.py HOST PORT CERT KEY``; prints ``ready`` once it listens."""

from __future__ import annotations

import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GROUP_VERSION = "metrics.k8s.io/v1beta1"
DISCOVERY = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
             "resources": [{"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics",
                            "verbs": ["get", "list"]},
                           {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics",
                            "verbs": ["get", "list"]}]}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        status = 200
        body: dict[str, object]
        if path == f"/apis/{GROUP_VERSION}":
            body = DISCOVERY
        elif path == f"/apis/{GROUP_VERSION}/nodes":
            body = {"kind": "NodeMetricsList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": []}
        elif path == f"/apis/{GROUP_VERSION}/pods":
            body = {"kind": "PodMetricsList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": []}
        else:
            status, body = 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}
        data = json.dumps(body).encode()
        self.send_response(status)  # adds Date: this process's (faked) clock
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main(host: str, port: int, cert: str, key: str) -> None:
    httpd = ThreadingHTTPServer((host, port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    print("ready", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
