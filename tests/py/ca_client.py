"""Asks istiod-rs's CA for a workload certificate as istio-agent does.

A fresh ECDSA P-256 key, a CSR naming the identity (or none), a bearer
token in the `authorization` metadata, over TLS verified against the given
root (or in the clear). The messages are encoded by hand: the CA's schema
is not in xds-protos. Prints one JSON line: the gRPC status, and for a
certificate its URI SANs, whether it is a CA, its lifetime, the chain's
length, and whether each certificate verifies with the next one (with the
`cryptography` package) and the last one is the root given.

Usage: ca_client.py ADDR (ROOT_PEM|-) TOKEN|- IDENTITY|- TTL_SECONDS

Environment: CA_CLIENT_KEY and CA_CLIENT_CHAIN (PEM files) present a client
certificate; CA_SAVE=PREFIX writes the new key and chain to PREFIX.key and
PREFIX.chain; CA_VERIFY_ROOT (a PEM file) is the root the chain must end
at, when it is not the one the server's TLS certificate is checked with;
CA_IMPERSONATE (an identity) asks for it as a node proxy does, in the
request's `ImpersonatedIdentity` metadata; CA_CERT_SIGNER names the signer
in its `CertSigner` metadata.
"""

import json
import os
import sys

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtensionOID, NameOID

PATH = "/istio.v1.auth.IstioCertificateService/CreateCertificate"


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(tag, body):
    return bytes([tag]) + varint(len(body)) + body


def request(csr_pem, ttl, impersonate=None, cert_signer=None):
    body = csr_pem.encode()
    out = b"\x0a" + varint(len(body)) + body + b"\x18" + varint(ttl)
    # metadata (4): Struct{fields: {key: Value{string_value (3)}}}
    entries = b""
    for key, value in (("ImpersonatedIdentity", impersonate), ("CertSigner", cert_signer)):
        if value:
            entry = field(0x0A, key.encode()) + field(0x12, field(0x1A, value.encode()))
            entries += field(0x0A, entry)
    if entries:
        out += field(0x22, entries)
    return out


def chain_of(resp):
    """The repeated string field 1 of IstioCertificateResponse."""
    out, i = [], 0
    while i < len(resp):
        tag = resp[i]
        i += 1
        n, shift = 0, 0
        while True:
            b = resp[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if tag != 0x0A:
            raise ValueError(f"unexpected tag {tag}")
        out.append(resp[i : i + n].decode())
        i += n
    return out


def main():
    addr, root_path, token, identity, ttl = sys.argv[1:6]
    key = ec.generate_private_key(ec.SECP256R1())
    # CA_CSR_ORG: an organisation in the subject, as istio-agent never sets.
    org = os.environ.get("CA_CSR_ORG")
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else [])
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject)
    if identity != "-":
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(identity)]), critical=False
        )
    csr = builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()
    if root_path == "-":
        channel = grpc.insecure_channel(addr)
        root = None
    else:
        root = open(root_path, "rb").read()
        client_key, client_chain = os.environ.get("CA_CLIENT_KEY"), os.environ.get("CA_CLIENT_CHAIN")
        if client_key and client_chain:
            creds = grpc.ssl_channel_credentials(
                root_certificates=root,
                private_key=open(client_key, "rb").read(),
                certificate_chain=open(client_chain, "rb").read(),
            )
        else:
            creds = grpc.ssl_channel_credentials(root_certificates=root)
        channel = grpc.secure_channel(
            addr, creds, options=[("grpc.ssl_target_name_override", "istiod.istio-system.svc")]
        )
    call = channel.unary_unary(PATH, request_serializer=None, response_deserializer=None)
    metadata = [] if token == "-" else [("authorization", "Bearer " + token)]
    try:
        req = request(csr, int(ttl), os.environ.get("CA_IMPERSONATE"), os.environ.get("CA_CERT_SIGNER"))
        resp = call(req, metadata=metadata, timeout=10)
    except grpc.RpcError as e:
        print(json.dumps({"code": e.code().name, "details": e.details()}))
        return
    chain = chain_of(resp)
    save = os.environ.get("CA_SAVE")
    if save:
        with open(save + ".key", "wb") as f:
            f.write(
                key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                )
            )
        with open(save + ".chain", "w") as f:
            f.write("".join(chain[:-1]))
    certs = [x509.load_pem_x509_certificate(c.encode()) for c in chain]
    verified = True
    for child, parent in zip(certs, certs[1:]):
        try:
            child.verify_directly_issued_by(parent)
        except Exception:
            # A self-signed root repeated at the end verifies by itself.
            if child.fingerprint(hashes.SHA256()) != parent.fingerprint(hashes.SHA256()):
                verified = False
    verify_root = os.environ.get("CA_VERIFY_ROOT")
    if verify_root:
        root = open(verify_root, "rb").read()
    if root is not None:
        given = x509.load_pem_x509_certificates(root)
        verified = verified and any(
            g.fingerprint(hashes.SHA256()) == certs[-1].fingerprint(hashes.SHA256()) for g in given
        )
    leaf = certs[0]
    san = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME)
    basic = leaf.extensions.get_extension_for_oid(ExtensionOID.BASIC_CONSTRAINTS).value
    public = leaf.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    mine = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    print(
        json.dumps(
            {
                "code": "OK",
                "sans": san.value.get_values_for_type(x509.UniformResourceIdentifier),
                "san_critical": san.critical,
                "is_ca": basic.ca,
                "lifetime": int((leaf.not_valid_after_utc - leaf.not_valid_before_utc).total_seconds()),
                "chain": len(chain),
                "verified": verified,
                "own_key": public == mine,
                "issuer": leaf.issuer.rfc4514_string(),
            }
        )
    )


if __name__ == "__main__":
    main()
