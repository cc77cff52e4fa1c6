"""One HTTPS request to istiod-rs's webhook port over HTTP/1.1, with
Python's ssl (no code of ours): TLS verified against the given root for the
name istiod.istio-system.svc, as the API server calls the webhook.

Usage: webhook_client.py ADDR ROOT_PEM < request.json
request.json: {"method", "path", "content_type", "body"} or, instead of
"body", "body_size" (that many bytes of "x"); with "send_only": N only the
first N bytes of the request are sent (a client that stalls) and "timeout"
bounds the wait for the server's answer or close.
Prints one JSON line: {"status", "body", "alpn", "elapsed"}.
"""

import json
import socket
import ssl
import sys
import time


def main():
    addr, root = sys.argv[1], sys.argv[2]
    req = json.load(sys.stdin)
    host, port = addr.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=root)
    ctx.set_alpn_protocols(["http/1.1"])
    body = req["body"].encode() if "body" in req else b"x" * req["body_size"]
    with socket.create_connection((host, int(port)), timeout=req.get("timeout", 20)) as raw:
        with ctx.wrap_socket(raw, server_hostname="istiod.istio-system.svc") as s:
            head = (
                f"{req.get('method', 'POST')} {req['path']} HTTP/1.1\r\n"
                f"Host: istiod.istio-system.svc\r\n"
                f"Content-Type: {req.get('content_type', 'application/json')}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            request = head.encode() + body
            if "send_only" in req:
                request = request[: req["send_only"]]
            started = time.monotonic()
            try:
                s.sendall(request)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may answer (413) before reading it all
            data = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except (ConnectionResetError, ssl.SSLError, socket.timeout):
                    break
                if not chunk:
                    break
                data += chunk
            elapsed = time.monotonic() - started
            alpn = s.selected_alpn_protocol()
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    status = int(lines[0].split(" ")[1]) if lines and lines[0].startswith("HTTP/") else 0
    headers = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    if headers.get("transfer-encoding") == "chunked":
        out, i = b"", 0
        while True:
            j = rest.index(b"\r\n", i)
            n = int(rest[i:j], 16)
            if n == 0:
                break
            out += rest[j + 2 : j + 2 + n]
            i = j + 2 + n + 2
        rest = out
    print(json.dumps({"status": status, "body": rest.decode(errors="replace"), "alpn": alpn, "elapsed": elapsed}))


if __name__ == "__main__":
    main()
