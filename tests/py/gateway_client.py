"""Plays an ingress gateway (node type router, or NODE_TYPE) on one ADS
stream with grpcio and xds-protos: asks for its clusters and listeners,
then for the route configurations its listeners name and the credentials
its listeners and clusters read over ADS, as Envoy does, ACKs each
response, decodes everything with upstream's types, and decides where a
table of requests would go, as Envoy's router would.

Usage: gateway_client.py ADDR (ROOT_PEM|-) (TOKEN|-) NAMESPACE LABELS_JSON

Environment:
  REQUESTS   JSON list of [route_name, host, path]: each decided
  EXTRA_SDS  JSON list of SDS names asked besides the listeners' own
  SERVICE_ACCOUNT  the node's service account
  NODE_TYPE  router (default) or sidecar
  FOLLOW     seconds to keep the stream open after the first report,
             printing one line per further response (pushes)

Prints one JSON line (the report), then one per push while FOLLOW lasts.
"""

import json
import os
import queue
import sys
import time

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2, tls_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import struct_pb2

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
LDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
RDS = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
SDS = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
TYPES = {CDS: cluster_pb2.Cluster, LDS: listener_pb2.Listener, RDS: route_pb2.RouteConfiguration, SDS: secret_pb2.Secret}


def chain_summary(chain):
    out = {"sni": list(chain.filter_chain_match.server_names)}
    if chain.HasField("transport_socket"):
        ctx = tls_pb2.DownstreamTlsContext()
        chain.transport_socket.typed_config.Unpack(ctx)
        common = ctx.common_tls_context
        out["certs"] = [s.name for s in common.tls_certificate_sds_secret_configs]
        if common.HasField("combined_validation_context"):
            out["ca"] = common.combined_validation_context.validation_context_sds_secret_config.name
        out["require_client_certificate"] = ctx.require_client_certificate.value
    for f in chain.filters:
        if f.name == "envoy.filters.network.http_connection_manager":
            h = hcm_pb2.HttpConnectionManager()
            f.typed_config.Unpack(h)
            out["rds"] = h.rds.route_config_name
        elif f.name == "envoy.filters.network.tcp_proxy":
            t = tcp_proxy_pb2.TcpProxy()
            f.typed_config.Unpack(t)
            out["tcp"] = t.cluster
    return out


def ads_sds_names(clusters):
    """The SDS names the clusters' upstream TLS reads from the control
    plane (an ADS config source; the agent serves the others)."""
    out = set()
    for c in clusters:
        sockets = [c.transport_socket] if c.HasField("transport_socket") else []
        sockets += [m.transport_socket for m in c.transport_socket_matches]
        for t in sockets:
            if t.name != "envoy.transport_sockets.tls":
                continue
            ctx = tls_pb2.UpstreamTlsContext()
            t.typed_config.Unpack(ctx)
            common = ctx.common_tls_context
            configs = list(common.tls_certificate_sds_secret_configs)
            if common.HasField("combined_validation_context"):
                configs.append(common.combined_validation_context.validation_context_sds_secret_config)
            out |= {s.name for s in configs if s.sds_config.HasField("ads")}
    return out


def pick_vhost(rc, host):
    """Envoy's domain order: exact, then the longest suffix wildcard, then *."""
    host = host.lower()
    exact = [v for v in rc.virtual_hosts if host in v.domains]
    if exact:
        return exact[0]
    best, best_len = None, -1
    for v in rc.virtual_hosts:
        for d in v.domains:
            if d.startswith("*") and d != "*" and host.endswith(d[1:]) and len(d) > best_len:
                best, best_len = v, len(d)
    if best:
        return best
    for v in rc.virtual_hosts:
        if "*" in v.domains:
            return v
    return None


def decide(rc, host, path, tls):
    vh = pick_vhost(rc, host)
    if vh is None:
        return "404"
    if vh.require_tls == route_components_pb2.VirtualHost.ALL and not tls:
        return "https-redirect"
    for r in vh.routes:
        m = r.match
        which = m.WhichOneof("path_specifier")
        hit = (
            (which == "prefix" and path.startswith(m.prefix))
            or (which == "path" and path == m.path)
            or (
                which == "path_separated_prefix"
                and (path == m.path_separated_prefix or path.startswith(m.path_separated_prefix + "/"))
            )
            or (which == "safe_regex" and __import__("re").fullmatch(m.safe_regex.regex, path))
        )
        if not hit or len(m.headers) or len(m.query_parameters):
            continue
        action = r.WhichOneof("action")
        if action == "route":
            if r.route.WhichOneof("cluster_specifier") == "cluster":
                return "cluster:" + r.route.cluster
            return "weighted:" + ",".join(c.name for c in r.route.weighted_clusters.clusters)
        if action == "redirect":
            return "redirect:" + r.redirect.path_redirect
        if action == "direct_response":
            return f"direct:{r.direct_response.status}"
    return "404"


def secret_summary(s):
    if s.HasField("tls_certificate"):
        chain = s.tls_certificate.certificate_chain.inline_bytes
        cert = x509.load_pem_x509_certificate(chain)
        key = serialization.load_pem_private_key(s.tls_certificate.private_key.inline_bytes, None)
        pub = lambda k: k.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        cn = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
        return {"type": "certificate", "cn": cn, "key_matches": pub(cert.public_key()) == pub(key.public_key())}
    ca = x509.load_pem_x509_certificate(s.validation_context.trusted_ca.inline_bytes)
    return {"type": "ca", "cn": ca.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value}


def main():
    addr, root_path, token, namespace, labels = sys.argv[1:6]
    pod = os.environ.get("POD", "istio-ingressgateway-5d8f")
    if root_path == "-":
        channel = grpc.insecure_channel(addr)
    else:
        creds = grpc.ssl_channel_credentials(root_certificates=open(root_path, "rb").read())
        channel = grpc.secure_channel(addr, creds, options=[("grpc.ssl_target_name_override", "istiod.istio-system.svc")])
    meta = struct_pb2.Struct()
    meta.update({"NAMESPACE": namespace, "LABELS": json.loads(labels), "ISTIO_VERSION": "1.28.0"})
    if os.environ.get("SERVICE_ACCOUNT"):
        meta.update({"SERVICE_ACCOUNT": os.environ["SERVICE_ACCOUNT"]})
    node_type = os.environ.get("NODE_TYPE", "router")
    node = base_pb2.Node(
        id=f"{node_type}~10.1.0.20~{pod}.{namespace}~{namespace}.svc.cluster.local", metadata=meta
    )
    out = queue.Queue()
    out.put(discovery_pb2.DiscoveryRequest(node=node, type_url=CDS))
    out.put(discovery_pb2.DiscoveryRequest(node=node, type_url=LDS))

    def requests():
        while True:
            r = out.get()
            if r is None:
                return
            yield r

    metadata = [] if token == "-" else [("authorization", "Bearer " + token)]
    stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
    follow = float(os.environ.get("FOLLOW", "0"))
    call = stub.StreamAggregatedResources(requests(), metadata=metadata, timeout=30 + follow)
    got = {}
    names = {RDS: [], SDS: json.loads(os.environ.get("EXTRA_SDS", "[]"))}
    asked = set()
    report_done = False
    deadline = None
    try:
        for resp in call:
            decoded = {}
            for a in resp.resources:
                m = TYPES[resp.type_url]()
                a.Unpack(m)
                decoded[m.name] = m
            got.setdefault(resp.type_url, {}).update(decoded)
            ack_names = names.get(resp.type_url, [])
            out.put(
                discovery_pb2.DiscoveryRequest(
                    node=node,
                    type_url=resp.type_url,
                    version_info=resp.version_info,
                    response_nonce=resp.nonce,
                    resource_names=ack_names,
                )
            )
            if report_done:
                summary = {"type": resp.type_url, "names": sorted(decoded)}
                if resp.type_url == SDS:
                    summary["secrets"] = {n: secret_summary(s) for n, s in decoded.items()}
                print(json.dumps(summary), flush=True)
                if time.time() > deadline:
                    break
                continue
            if resp.type_url == LDS and RDS not in asked:
                chains = [c for l in decoded.values() for c in l.filter_chains]
                summaries = [chain_summary(c) for c in chains]
                names[RDS] = sorted({s["rds"] for s in summaries if "rds" in s})
                sds = {n for s in summaries for n in s.get("certs", [])} | {s["ca"] for s in summaries if "ca" in s}
                sds |= ads_sds_names(got.get(CDS, {}).values())
                names[SDS] = sorted(sds | set(names[SDS]))
                for t in (RDS, SDS):
                    asked.add(t)
                    out.put(discovery_pb2.DiscoveryRequest(node=node, type_url=t, resource_names=names[t]))
            if all(t in got for t in (CDS, LDS, RDS, SDS)):
                report = {
                    "clusters": sorted(got[CDS]),
                    "listeners": {
                        n: {
                            "port": l.address.socket_address.port_value,
                            "chains": [chain_summary(c) for c in l.filter_chains],
                        }
                        for n, l in got[LDS].items()
                    },
                    "routes": sorted(got[RDS]),
                    "cluster_sds": sorted(ads_sds_names(got[CDS].values())),
                    "secrets": {n: secret_summary(s) for n, s in got[SDS].items()},
                    "decisions": [
                        decide(got[RDS][r], host, path, r.startswith("https.")) if r in got[RDS] else "no route config"
                        for r, host, path in json.loads(os.environ.get("REQUESTS", "[]"))
                    ],
                }
                print(json.dumps(report), flush=True)
                report_done = True
                if follow <= 0:
                    break
                deadline = time.time() + follow
    except grpc.RpcError as e:
        if not report_done:
            print(json.dumps({"code": e.code().name, "details": e.details()}), flush=True)
    out.put(None)
    call.cancel()


if __name__ == "__main__":
    main()
