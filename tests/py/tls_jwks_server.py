"""A JWKS over HTTPS that speaks only TLS 1.3 (Python's ssl, OpenSSL):
the peer for the JWKS client's COMPLIANCE_POLICY test.

argv: certificate file, key file, and optionally a file each request's
path is appended to (a line each). Prints the port it listens on
(loopback), then serves until killed. It is also the API server the
Kubernetes client's COMPLIANCE_POLICY test points at.
"""

import http.server
import ssl
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if len(sys.argv) > 3:
            with open(sys.argv[3], "a") as f:
                f.write(self.path + "\n")
        body = b'{"keys":[]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
