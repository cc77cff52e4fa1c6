"""A TLS handshake with one of the server's TLS ports, as a client
limited to some versions and TLS 1.2 ciphers (Python's ssl, OpenSSL).
Prints one JSON line: {"ok": true, "version", "cipher"} or {"ok": false,
"error"}.

usage: tls_probe.py ADDR ROOT_PEM [--min 1.2|1.3] [--max 1.2|1.3] [--ciphers OPENSSL_NAMES]
"""

import json
import socket
import ssl
import sys


def main():
    addr, root = sys.argv[1], sys.argv[2]
    opts = dict(zip(sys.argv[3::2], sys.argv[4::2]))
    versions = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
    ctx = ssl.create_default_context(cafile=root)
    ctx.check_hostname = False
    ctx.set_alpn_protocols(["h2"])
    if "--min" in opts:
        ctx.minimum_version = versions[opts["--min"]]
    if "--max" in opts:
        ctx.maximum_version = versions[opts["--max"]]
    if "--ciphers" in opts:
        ctx.set_ciphers(opts["--ciphers"])
    host, port = addr.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="istiod.istio-system.svc") as tls:
                print(json.dumps({"ok": True, "version": tls.version(), "cipher": tls.cipher()[0]}))
    except (ssl.SSLError, OSError) as e:
        print(json.dumps({"ok": False, "error": str(e)}))


if __name__ == "__main__":
    main()
