"""grpcio + xds-protos as an independent ADS client: fetches what one proxy
is served (CDS, LDS, then the RDS names its listeners use and the ECDS
names their filters discover) from a running
pilot-discovery and prints it as JSON (protobuf's MessageToDict, every Any
decoded by the upstream descriptors), for a Rust test to assert on.

usage: ads_fetch.py GRPC_ADDR NODE_JSON
NODE_JSON: {"id": "...", "metadata": {...}}

With EDS=1, the load assignments of its EDS clusters are fetched too
(under "endpoints"). With PGV=1 in the environment, every resource is also checked with
Envoy's own field rules (protoc-gen-validate, inner Anys unpacked, as
golden.py does) and the failures listed under "pgv_errors".
"""

import json
import os
import queue
import sys

import grpc
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2, extension_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.clusters.aggregate.v3 import cluster_pb2 as aggregate_pb2  # noqa: F401 (EnvoyFilter tests)
from envoy.extensions.filters.http.lua.v3 import lua_pb2  # noqa: F401 (EnvoyFilter tests)
from envoy.extensions.filters.http.wasm.v3 import wasm_pb2 as http_wasm_pb2  # noqa: F401 (ECDS)
from envoy.extensions.filters.network.wasm.v3 import wasm_pb2 as network_wasm_pb2  # noqa: F401 (ECDS)
from envoy.extensions.filters.http.local_ratelimit.v3 import local_rate_limit_pb2  # noqa: F401
from envoy.extensions.clusters.dynamic_forward_proxy.v3 import cluster_pb2 as dfp_cluster_pb2  # noqa: F401
from envoy.extensions.network.dns_resolver.cares.v3 import cares_dns_resolver_pb2  # noqa: F401 (DNS clusters)
from envoy.extensions.filters.http.cors.v3 import cors_pb2  # noqa: F401 (Any in listeners)
from envoy.extensions.filters.http.dynamic_forward_proxy.v3 import dynamic_forward_proxy_pb2  # noqa: F401
from envoy.extensions.filters.http.ext_authz.v3 import ext_authz_pb2  # noqa: F401 (Any in listeners)
from envoy.extensions.filters.http.fault.v3 import fault_pb2  # noqa: F401 (Any in listeners)
from envoy.extensions.filters.http.grpc_stats.v3 import config_pb2 as grpc_stats_pb2  # noqa: F401
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2 as jwt_authn_pb2  # noqa: F401
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2 as http_rbac_pb2  # noqa: F401
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401 (Any in listeners)
from envoy.extensions.filters.listener.http_inspector.v3 import http_inspector_pb2  # noqa: F401
from envoy.extensions.filters.listener.original_dst.v3 import original_dst_pb2  # noqa: F401
from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2  # noqa: F401
from envoy.extensions.filters.network.ext_authz.v3 import ext_authz_pb2 as net_ext_authz_pb2  # noqa: F401
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2
from envoy.extensions.filters.network.rbac.v3 import rbac_pb2 as net_rbac_pb2  # noqa: F401
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2  # noqa: F401 (Any in listeners)
from envoy.extensions.filters.network.mongo_proxy.v3 import mongo_proxy_pb2  # noqa: F401 (Mongo ports)
from envoy.extensions.access_loggers.file.v3 import file_pb2  # noqa: F401 (gateways' access logs)
from envoy.extensions.filters.network.redis_proxy.v3 import redis_proxy_pb2  # noqa: F401 (Redis ports)
from envoy.extensions.request_id.uuid.v3 import uuid_pb2  # noqa: F401
from envoy.extensions.retry.host.previous_hosts.v3 import previous_hosts_pb2  # noqa: F401 (Any in routes)
from envoy.extensions.transport_sockets.raw_buffer.v3 import raw_buffer_pb2  # noqa: F401
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2  # noqa: F401 (Any in clusters)
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401 (Any in clusters)
from envoy.extensions.filters.http.set_filter_state.v3 import set_filter_state_pb2  # noqa: F401 (waypoints)
from envoy.extensions.filters.network.set_filter_state.v3 import set_filter_state_pb2 as net_sfs_pb2  # noqa: F401
from envoy.extensions.matching.common_inputs.network.v3 import network_inputs_pb2  # noqa: F401 (waypoints)
from envoy.extensions.transport_sockets.internal_upstream.v3 import internal_upstream_pb2  # noqa: F401
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from xds.type.matcher.v3 import ip_pb2  # noqa: F401 (a waypoint's filter chain matcher)
from google.protobuf import descriptor_pool, json_format, struct_pb2
from udpa.type.v1 import typed_struct_pb2  # noqa: F401

sys.path.insert(0, __import__("os").path.dirname(__file__))
from golden import add_istio_proxy_types, envoy_errors, load_pgv  # noqa: E402 (istio-proxy's own filter configs)

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
LDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
RDS = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
ECDS = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"


def main():
    addr, spec = sys.argv[1], json.loads(sys.argv[2])
    add_istio_proxy_types(descriptor_pool.Default())
    meta = struct_pb2.Struct()
    meta.update(spec.get("metadata", {}))
    node = base_pb2.Node(id=spec["id"], metadata=meta)
    q = queue.Queue()
    with grpc.insecure_channel(addr) as ch:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(ch)
        responses = stub.StreamAggregatedResources(iter(q.get, None), timeout=30)

        def fetch(type_url, names=(), first=False):
            req = discovery_pb2.DiscoveryRequest(type_url=type_url, resource_names=list(names))
            if first:
                req.node.CopyFrom(node)
            q.put(req)
            r = next(responses)
            assert r.type_url == type_url, r.type_url
            q.put(discovery_pb2.DiscoveryRequest(
                type_url=type_url, version_info=r.version_info, response_nonce=r.nonce, resource_names=list(names)))
            return r

        out = {"clusters": {}, "listeners": {}, "routes": {}, "extension_configs": {}, "endpoints": {}}
        check = os.environ.get("PGV") == "1"
        if check:
            import warnings

            warnings.simplefilter("ignore", FutureWarning)
            pgv = load_pgv()
            pool = descriptor_pool.Default()
            out["pgv_errors"] = []

            def checked(kind, m):
                out["pgv_errors"].extend(envoy_errors(pgv, pool, m, f"{kind} {getattr(m, 'name', '') or m.cluster_name}"))
        else:

            def checked(kind, m):
                pass

        eds = []
        for a in fetch(CDS, first=True).resources:
            c = cluster_pb2.Cluster()
            a.Unpack(c)
            checked("cluster", c)
            out["clusters"][c.name] = json_format.MessageToDict(c)
            if c.type == cluster_pb2.Cluster.EDS:
                eds.append(c.eds_cluster_config.service_name or c.name)
        if eds and os.environ.get("EDS") == "1":
            for a in fetch(EDS, sorted(eds)).resources:
                cla = endpoint_pb2.ClusterLoadAssignment()
                a.Unpack(cla)
                checked("load assignment", cla)
                out["endpoints"][cla.cluster_name] = json_format.MessageToDict(cla)
        rds, ecds = set(), set()
        for a in fetch(LDS).resources:
            lis = listener_pb2.Listener()
            a.Unpack(lis)
            checked("listener", lis)
            out["listeners"][lis.name] = json_format.MessageToDict(lis)
            chains = list(lis.filter_chains) + ([lis.default_filter_chain] if lis.HasField("default_filter_chain") else [])
            for fc in chains:
                for f in fc.filters:
                    if f.HasField("config_discovery"):
                        ecds.add(f.name)
                    if f.typed_config.type_url == HCM:
                        h = http_connection_manager_pb2.HttpConnectionManager()
                        f.typed_config.Unpack(h)
                        if h.HasField("rds"):
                            rds.add(h.rds.route_config_name)
                        ecds.update(hf.name for hf in h.http_filters if hf.HasField("config_discovery"))
        if rds:
            for a in fetch(RDS, sorted(rds)).resources:
                rc = route_pb2.RouteConfiguration()
                a.Unpack(rc)
                checked("route", rc)
                out["routes"][rc.name] = json_format.MessageToDict(rc)
        if ecds:
            for a in fetch(ECDS, sorted(ecds)).resources:
                ec = extension_pb2.TypedExtensionConfig()
                a.Unpack(ec)
                checked("extension config", ec)
                out["extension_configs"][ec.name] = json_format.MessageToDict(ec)
        q.put(None)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
