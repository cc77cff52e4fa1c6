"""An external Kubernetes CSR signer, as cert-manager's or a cloud's would be,
against the fake API server: it lists CertificateSigningRequests, and each
one for its signer that is approved and not yet signed it signs (the CSR's
public key and SANs, `expirationSeconds` long, under a CA it makes at
start) or, when a SAN contains "deny", denies. With the `cryptography`
package only; no code of istiod-rs.

Usage: csr_signer.py API_URL SIGNER_NAME OUT_DIR

Writes OUT_DIR/root-cert.pem (its CA) before it starts, and a JSON line per
CSR it handled to OUT_DIR/seen.jsonl. Stops after two minutes, or when
OUT_DIR/stop exists.
"""

import base64
import datetime
import json
import os
import sys
import time
import urllib.request

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


def call(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def main():
    api, signer, out = sys.argv[1:4]
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "external signer")])
    now = datetime.datetime.now(datetime.timezone.utc)
    ca = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(key, hashes.SHA256())
    )
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "root-cert.pem.tmp"), "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    os.rename(os.path.join(out, "root-cert.pem.tmp"), os.path.join(out, "root-cert.pem"))
    done = set()
    deadline = time.time() + 120
    while time.time() < deadline and not os.path.exists(os.path.join(out, "stop")):
        try:
            items = call(api + PATH).get("items", [])
        except Exception:
            time.sleep(0.05)
            continue
        for o in items:
            meta, spec, status = o["metadata"], o["spec"], o.get("status", {})
            if meta["name"] in done or spec.get("signerName") != signer or status.get("certificate"):
                continue
            conditions = status.get("conditions", [])
            if not any(c.get("type") == "Approved" and c.get("status") == "True" for c in conditions):
                continue
            csr = x509.load_pem_x509_csr(base64.b64decode(spec["request"]))
            sans = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            uris = sans.get_values_for_type(x509.UniformResourceIdentifier)
            if any("deny" in u for u in uris):
                status["conditions"] = conditions + [
                    {"type": "Denied", "status": "True", "reason": "Policy", "message": "not for this signer"}
                ]
            else:
                lifetime = spec.get("expirationSeconds") or 3600
                cert = (
                    x509.CertificateBuilder()
                    .subject_name(x509.Name([]))
                    .issuer_name(name)
                    .public_key(csr.public_key())
                    .serial_number(x509.random_serial_number())
                    .not_valid_before(datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1))
                    .not_valid_after(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=lifetime))
                    .add_extension(sans, critical=True)
                    .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                    .sign(key, hashes.SHA256())
                )
                pem = cert.public_bytes(serialization.Encoding.PEM)
                status["certificate"] = base64.b64encode(pem).decode()
            o["status"] = status
            call(f"{api}{PATH}/{meta['name']}/status", "PUT", o)
            done.add(meta["name"])
            seen = {
                "name": meta["name"],
                "signerName": spec.get("signerName"),
                "usages": spec.get("usages"),
                "expirationSeconds": spec.get("expirationSeconds"),
                "approved": [c for c in conditions if c.get("type") == "Approved"],
                "uris": uris,
                "labels": meta.get("labels", {}),
            }
            with open(os.path.join(out, "seen.jsonl"), "a") as f:
                f.write(json.dumps(seen) + "\n")
        time.sleep(0.02)


main()
