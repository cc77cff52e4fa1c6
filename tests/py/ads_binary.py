"""grpcio + xds-protos as an independent xDS client of the running
pilot-discovery binary (serving examples/bookinfo from --configDir).

usage: ads_binary.py GRPC_ADDR HTTP_ADDR

Prints "ok NAME" / "FAIL NAME: why" per check, then "N passed, N failed".
"""

import gc
import json
import os
import queue
import sys
import urllib.error
import urllib.request

import grpc
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2, health_check_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.http.cors.v3 import cors_pb2  # noqa: F401 (Any in listeners)
from envoy.extensions.filters.http.fault.v3 import fault_pb2  # noqa: F401 (Any in listeners)
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401 (Any in listeners)
from envoy.extensions.filters.http.grpc_stats.v3 import config_pb2 as grpc_stats_pb2  # noqa: F401 (Any in listeners)
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2 as jwt_authn_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2  # noqa: F401 (Any in listeners)
from envoy.extensions.filters.network.mongo_proxy.v3 import mongo_proxy_pb2  # noqa: F401 (Mongo ports)
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2  # noqa: F401 (Any in clusters)
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401 (Any in clusters)
from envoy.extensions.transport_sockets.raw_buffer.v3 import raw_buffer_pb2  # noqa: F401 (Any in clusters)
from envoy.extensions.request_id.uuid.v3 import uuid_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import struct_pb2
from udpa.type.v1 import typed_struct_pb2

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
LDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
RDS = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
REVIEWS = "outbound|9080||reviews.bookinfo.svc.cluster.local"
RATINGS = "outbound|9080||ratings.bookinfo.svc.cluster.local"
WANT_CLUSTERS = {
    "outbound|9080||productpage.bookinfo.svc.cluster.local",
    "outbound|9080||details.bookinfo.svc.cluster.local",
    REVIEWS,
    RATINGS,
    "outbound|27017||mongodb.bookinfo.svc.cluster.local",
}


def node(n):
    meta = struct_pb2.Struct()
    meta.update({"NAMESPACE": "bookinfo", "ISTIO_VERSION": "1.28.0", "LABELS": {"app": "productpage"}})
    return base_pb2.Node(id=f"sidecar~10.244.1.{n}~productpage-v1-{n}.bookinfo~bookinfo.svc.cluster.local", metadata=meta)


class Stream:
    """A bidi stream driven one request at a time."""

    def __init__(self, method):
        self.q = queue.Queue()
        self.responses = method(iter(self.q.get, None), timeout=30)

    def send(self, req):
        self.q.put(req)

    def recv(self):
        return next(self.responses)

    def close(self):
        self.q.put(None)


def http_json(addr, path):
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=10) as r:
        return json.loads(r.read())


def main():
    # The cyclic collector may run a call object's __del__ while grpcio holds
    # that call's lock (grpc/_channel.py), which deadlocked this script in
    # CI; a short script can leave cycles to the end (and skips the final
    # collection, see the end).
    gc.disable()
    grpc_addr, http_addr, monitoring_addr = sys.argv[1], sys.argv[2], sys.argv[3]
    channel = grpc.insecure_channel(grpc_addr)
    stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
    results = []

    def check(name, fn):
        try:
            fn()
            results.append((name, None))
        except Exception as e:  # noqa: BLE001
            results.append((name, f"{type(e).__name__}: {e}"))

    def sotw():
        s = Stream(stub.StreamAggregatedResources)
        s.send(discovery_pb2.DiscoveryRequest(node=node(10), type_url=CDS))
        r = s.recv()
        assert r.type_url == CDS and r.nonce and r.version_info, r
        clusters = {}
        for a in r.resources:
            c = cluster_pb2.Cluster()
            assert a.Unpack(c), a.type_url
            clusters[c.name] = c
        assert WANT_CLUSTERS <= set(clusters), sorted(clusters)
        c = clusters[REVIEWS]
        assert c.type == cluster_pb2.Cluster.EDS and c.eds_cluster_config.service_name == REVIEWS, c
        # istiod's applyLoadBalancer: a cluster that takes unhealthy
        # endpoints (PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS) has Envoy's panic
        # threshold off, set explicitly to 0.
        assert c.common_lb_config.HasField("healthy_panic_threshold"), c
        assert c.common_lb_config.healthy_panic_threshold.value == 0, c
        s.send(discovery_pb2.DiscoveryRequest(type_url=CDS, version_info=r.version_info, response_nonce=r.nonce))
        s.send(discovery_pb2.DiscoveryRequest(type_url=EDS, resource_names=[REVIEWS]))
        e = s.recv()
        assert e.type_url == EDS, e.type_url
        cla = endpoint_pb2.ClusterLoadAssignment()
        assert len(e.resources) == 1 and e.resources[0].Unpack(cla)
        eps = [ep for loc in cla.endpoints for ep in loc.lb_endpoints]
        # The example's terminating pod is not sent (istiod's
        # filterIstioEndpoint; draining ones only for persistent sessions).
        assert cla.cluster_name == REVIEWS and len(eps) == 3, cla
        assert all(ep.health_status == health_check_pb2.HEALTHY for ep in eps), cla
        assert all(loc.locality.zone for loc in cla.endpoints)
        s.send(discovery_pb2.DiscoveryRequest(type_url=EDS, resource_names=[REVIEWS], version_info=e.version_info, response_nonce=e.nonce))
        # The server's view of this proxy, from its debug endpoints, in
        # istiod's shapes (pilot/pkg/xds/debug.go): syncz rows are
        # SyncStatus, what `istioctl proxy-status` parses (SYNCED when a
        # type's sent nonce was ACKed).
        proxy = node(10).id
        short = "productpage-v1-10.bookinfo"  # istiod's Proxy.ID: pod.namespace
        for _ in range(50):
            rows = [row for row in http_json(http_addr, "/debug/syncz") if row["proxy"] == short]
            if rows and all(rows[0].get(f"{t}_sent") == rows[0].get(f"{t}_acked") for t in ("cluster", "endpoint")):
                break
            import time

            time.sleep(0.1)
        else:
            raise AssertionError(f"syncz never showed CDS and EDS ACKed: {rows}")
        row = rows[0]
        sync_status = {  # SyncStatus's json tags
            "cluster_id", "proxy", "proxy_type", "proxy_version", "istio_version", "cluster_sent", "cluster_acked",
            "listener_sent", "listener_acked", "route_sent", "route_acked", "endpoint_sent", "endpoint_acked",
            "extensionconfig_sent", "extensionconfig_acked", "resources",
        }
        assert set(row) <= sync_status, set(row) - sync_status
        assert row["proxy_type"] == "sidecar" and row["istio_version"] == "1.28.0", row
        assert "listener_sent" not in row, "omitempty: LDS was never asked for"
        status = row["resources"][CDS]
        assert set(status) <= {"sent", "acked", "sentTime", "lastError"} and status["sent"] == status["acked"], status
        assert status["sentTime"].endswith("Z"), status
        assert [r for r in http_json(http_addr, "/debug/syncz?namespace=bookinfo") if r["proxy"] == short]
        assert not http_json(http_addr, "/debug/syncz?namespace=other")
        # pilot_xds counts connected proxies by ISTIO_VERSION, as istiod's
        # recordXDSClients does: this one says 1.28.0.
        with urllib.request.urlopen(f"http://{monitoring_addr}/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
        connected = [l for l in metrics.splitlines() if l.startswith('pilot_xds{version="1.28.0"} ')]
        assert connected and int(connected[0].split()[-1]) >= 1, metrics
        # adsz and connections: AdsClients / AdsClient.
        adsz = http_json(http_addr, "/debug/adsz?proxyID=" + short)
        assert adsz["totalClients"] == 1, adsz
        client = adsz["clients"][0]
        assert client["connectionId"].startswith(short + "-"), client
        assert client["labels"] == {"app": "productpage"}, client
        assert client["watches"][EDS] == [REVIEWS], client
        assert client["address"].startswith("127.0.0.1:"), client
        conns = http_json(http_addr, "/debug/connections")
        mine = [c for c in conns["clients"] if c["connectionId"] == client["connectionId"]]
        assert conns["totalClients"] >= 1 and mine and set(mine[0]) == {"connectionId", "connectedAt", "address"}, conns
        # proxyID as istioctl sends it: pod.namespace, the connection id, or
        # the full node id; a missing or unknown one gets istiod's answers.
        for pid in (short, client["connectionId"], proxy):
            d = http_json(http_addr, "/debug/config_dump?proxyID=" + urllib.parse.quote(pid))
            assert d["configs"], pid
        for path, code, text in (
            ("/debug/config_dump", 400, "You must provide a proxyID in the query string\n"),
            ("/debug/config_dump?proxyID=nobody.nowhere", 404,
             "Proxy not connected to this Pilot instance. It may be connected to another instance.\n"),
        ):
            try:
                urllib.request.urlopen(f"http://{http_addr}{path}", timeout=10)
                raise AssertionError(f"{path} answered 200")
            except urllib.error.HTTPError as e:
                assert (e.code, e.read().decode()) == (code, text), (path, e.code)
        dump = http_json(http_addr, "/debug/config_dump?include_eds&proxyID=" + urllib.parse.quote(proxy))
        # istiod's order (debug.go connectionConfigDump), endpoints only
        # with include_eds.
        assert [c["@type"].rsplit(".", 1)[1] for c in dump["configs"]] == [
            "BootstrapConfigDump", "ClustersConfigDump", "EndpointsConfigDump", "ListenersConfigDump",
            "ScopedRoutesConfigDump", "RoutesConfigDump", "SecretsConfigDump", "EcdsConfigDump"], dump["configs"]
        by_type = {c["@type"]: c for c in dump["configs"]}
        # The clusters' part parses whole with the upstream admin types.
        from envoy.admin.v3 import config_dump_shared_pb2
        from google.protobuf import json_format
        cds_part = dict(by_type["type.googleapis.com/envoy.admin.v3.ClustersConfigDump"])
        del cds_part["@type"]
        json_format.ParseDict(cds_part, config_dump_shared_pb2.ClustersConfigDump())
        clusters = by_type["type.googleapis.com/envoy.admin.v3.ClustersConfigDump"]["dynamicActiveClusters"]
        assert REVIEWS in {c["cluster"]["name"] for c in clusters}, clusters
        # Envoy's shape: each entry re-parses with the upstream types.
        entry = next(c for c in clusters if c["cluster"]["name"] == REVIEWS)
        from google.protobuf import any_pb2

        packed = json_format.ParseDict(entry["cluster"], any_pb2.Any())
        parsed = cluster_pb2.Cluster()
        assert packed.Unpack(parsed), packed.type_url
        assert parsed.eds_cluster_config.service_name == REVIEWS
        # istiod's applyMetadataExchange (cluster_builder.go): upstream
        # metadata exchange on every outbound cluster.
        assert [f.name for f in parsed.filters] == ["istio.metadata_exchange"], parsed.filters
        assert '"error"' not in json.dumps(dump), "config_dump renders every resource"
        eds = by_type["type.googleapis.com/envoy.admin.v3.EndpointsConfigDump"]["dynamicEndpointConfigs"]
        assert eds[0]["endpointConfig"]["clusterName"] == REVIEWS, eds
        # edsz: the proxy's endpoints only (typedConfigDumpHandler).
        edsz = http_json(http_addr, "/debug/edsz?proxyID=" + short)
        assert [c["@type"] for c in edsz["configs"]] == [EDS], edsz
        # The per-proxy views: its sidecar scope (SidecarScope.MarshalJSON),
        # its Telemetry (computedTelemetries), its service targets.
        scope = http_json(http_addr, "/debug/sidecarz?proxyID=" + short)
        assert scope["namespace"] == "bookinfo" and scope["name"], scope
        assert REVIEWS.split("|")[-1] in scope["servicesByHostname"], sorted(scope["servicesByHostname"])
        assert set(http_json(http_addr, "/debug/telemetryz?proxyID=" + short)) == {"Metrics", "Logging", "Tracing"}
        assert short in http_json(http_addr, "/debug/instancesz")
        # explain (ours): the objects behind a cluster this proxy is served,
        # and why it sees the service.
        why = http_json(http_addr, f"/debug/explain?proxyID={short}&type=cds&name=" + urllib.parse.quote(REVIEWS))
        kinds = [s["kind"] for s in why["sources"]]
        assert kinds[0] == "Service" and "DestinationRule" in kinds, why
        assert why["visibility"][REVIEWS.split("|")[-1]]["visible"] is True, why
        # force_disconnect (UNSAFE_ENABLE_ADMIN_ENDPOINTS): the stream ends
        # with OK, as istiod's Connection.Stop ends it; the proxy would
        # reconnect.
        with urllib.request.urlopen(f"http://{http_addr}/debug/force_disconnect?proxyID={short}", timeout=10) as r:
            assert r.read() == b"OK"
        try:
            while True:
                s.recv()
        except StopIteration:
            pass
        assert not [row for row in http_json(http_addr, "/debug/syncz") if row["proxy"] == short]
        s.close()

    def delta():
        s = Stream(stub.DeltaAggregatedResources)
        s.send(discovery_pb2.DeltaDiscoveryRequest(node=node(11), type_url=CDS))
        r = s.recv()
        names = {res.name for res in r.resources}
        assert WANT_CLUSTERS <= names, sorted(names)
        assert all(res.version for res in r.resources)
        s.send(discovery_pb2.DeltaDiscoveryRequest(type_url=CDS, response_nonce=r.nonce))
        s.send(discovery_pb2.DeltaDiscoveryRequest(type_url=EDS, resource_names_subscribe=[RATINGS]))
        e = s.recv()
        assert [res.name for res in e.resources] == [RATINGS], e
        cla = endpoint_pb2.ClusterLoadAssignment()
        assert e.resources[0].resource.Unpack(cla) and cla.cluster_name == RATINGS
        s.send(discovery_pb2.DeltaDiscoveryRequest(type_url=EDS, response_nonce=e.nonce))
        s.close()

    def sidecar_listeners():
        """What a sidecar's wildcard LDS holds, as istiod builds it
        (pilot/pkg/networking/core/listener.go, listener_builder.go): the
        capture listeners virtualOutbound (15001, binds, hands connections
        to the listener of their original destination) and virtualInbound
        (15006), an HTTP listener 0.0.0.0_<port> per HTTP port and a TCP
        listener <VIP>_<port> per TCP service port, neither binding; no
        proxyless gRPC API listener. Then the route configuration of port
        9080 (httproute.go): no port in the domains, the port ignored in
        host matching, short names of the proxy's own namespace."""
        s = Stream(stub.StreamAggregatedResources)
        s.send(discovery_pb2.DiscoveryRequest(node=node(12), type_url=LDS))
        r = s.recv()
        assert r.type_url == LDS, r.type_url
        listeners = {}
        for a in r.resources:
            lst = listener_pb2.Listener()
            assert a.Unpack(lst), a.type_url
            listeners[lst.name] = lst
        want = {"virtualOutbound", "virtualInbound", "0.0.0.0_9080", "0.0.0.0_7070", "10.96.10.20_27017"}
        assert want <= set(listeners), sorted(listeners)
        assert not [n for n in listeners if ":" in n], f"API listeners sent to a sidecar: {sorted(listeners)}"
        out = listeners["virtualOutbound"]
        assert out.address.socket_address.port_value == 15001 and out.use_original_dst.value, out
        assert not out.HasField("bind_to_port"), "virtualOutbound must bind"
        assert listeners["virtualInbound"].address.socket_address.port_value == 15006
        # productpage's RequestAuthentication (examples/bookinfo): the
        # jwt_authn filter on its inbound HTTP chain, before RBAC and the
        # router, with the rule's issuer and inline keys
        # (pilot/pkg/security/authn/policy_applier.go).
        chain = next(c for c in listeners["virtualInbound"].filter_chains if c.name == "0.0.0.0_9080")
        # istiod's inbound HTTP chain (listener_inbound.go): metadata
        # exchange over TCP, then the HCM; in it metadata exchange over
        # headers first, jwt_authn next (pilot/pkg/xds/filters/filters.go).
        assert [f.name for f in chain.filters] == [
            "istio.metadata_exchange",
            "envoy.filters.network.http_connection_manager",
        ], [f.name for f in chain.filters]
        mx = typed_struct_pb2.TypedStruct()
        assert chain.filters[0].typed_config.Unpack(mx)
        assert mx.type_url == "type.googleapis.com/envoy.tcp.metadataexchange.config.MetadataExchange", mx
        assert mx.value["protocol"] == "istio-peer-exchange" and mx.value["enable_discovery"], mx
        hcm = http_connection_manager_pb2.HttpConnectionManager()
        assert chain.filters[1].typed_config.Unpack(hcm), chain.filters[1].name
        names = [f.name for f in hcm.http_filters]
        assert names[:2] == ["istio.metadata_exchange", "envoy.filters.http.jwt_authn"], names
        assert names[-1] == "envoy.filters.http.router", names
        jwt = jwt_authn_pb2.JwtAuthentication()
        assert hcm.http_filters[1].typed_config.Unpack(jwt)
        provider = jwt.providers["origins-0"]
        assert provider.issuer == "https://auth.bookinfo.example", provider
        assert provider.payload_in_metadata == "payload" and provider.local_jwks.inline_string.startswith('{"keys"')
        # Tracing as istiod's configureTracingFromTelemetry sets it with
        # enableTracing and no Telemetry (tracing.go): sampling at
        # PILOT_TRACE_SAMPLING, istiod's tags (per proxy on the inbound
        # side), the bootstrap's tracer; the UUID request id extension.
        tags = {t.tag: t for t in hcm.tracing.custom_tags}
        assert hcm.tracing.random_sampling.value == 1.0 and hcm.tracing.overall_sampling.value == 100.0, hcm.tracing
        assert tags["istio.namespace"].literal.value == "bookinfo", tags
        assert tags["istio.canonical_service"].literal.value == "unknown", tags
        assert not hcm.tracing.HasField("provider")
        rid = uuid_pb2.UuidRequestIdConfig()
        assert hcm.request_id_extension.typed_config.Unpack(rid) and rid.use_request_id_for_trace_sampling.value
        out_hcm = http_connection_manager_pb2.HttpConnectionManager()
        assert listeners["0.0.0.0_9080"].filter_chains[0].filters[0].typed_config.Unpack(out_hcm)
        assert out_hcm.tracing.random_sampling.value == 1.0 and "istio.namespace" not in {
            t.tag for t in out_hcm.tracing.custom_tags}, out_hcm.tracing
        for name in ("0.0.0.0_9080", "10.96.10.20_27017"):
            assert listeners[name].HasField("bind_to_port") and not listeners[name].bind_to_port.value, name
        s.send(discovery_pb2.DiscoveryRequest(type_url=LDS, version_info=r.version_info, response_nonce=r.nonce))
        s.send(discovery_pb2.DiscoveryRequest(type_url=RDS, resource_names=["9080"]))
        rr = s.recv()
        assert rr.type_url == RDS and len(rr.resources) == 1, rr
        rc = route_pb2.RouteConfiguration()
        assert rr.resources[0].Unpack(rc)
        assert rc.ignore_port_in_host_matching, rc
        vh = next(v for v in rc.virtual_hosts if v.name == "reviews.bookinfo.svc.cluster.local:9080")
        assert list(vh.domains) == [
            "reviews.bookinfo.svc.cluster.local",
            "reviews.bookinfo.svc.cluster.local.",
            "reviews",
            "reviews.bookinfo.svc",
            "reviews.bookinfo",
            "10.96.10.12",
        ], list(vh.domains)
        assert not any(r.HasField("metadata") for v in rc.virtual_hosts for r in v.routes), "internal markers served"
        assert rc.virtual_hosts[-1].name == "allow_any", rc.virtual_hosts[-1].name
        s.close()

    def missing_node():
        s = Stream(stub.StreamAggregatedResources)
        s.send(discovery_pb2.DiscoveryRequest(type_url=CDS))
        try:
            s.recv()
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.code()
            return
        finally:
            s.close()
        raise AssertionError("accepted a stream without a node")

    def unknown_types():
        # istio-agent's types on a sidecar's stream: its name table (NDS)
        # is served, one unnamed resource; its health reports are taken
        # and never answered (pilot/pkg/xds/ads.go), and the stream goes
        # on. A type the server has no generator for, as istiod answers it
        # (pilot/pkg/xds/xdsgen.go findGenerator): a config type goes to
        # the api generator, which refuses a caller that is not
        # authenticated (plaintext here; apigen.go authorize,
        # ENABLE_XDS_API_GENERATOR_AUTH); proxyless gRPC's generator sends
        # nothing for it and the stream goes on.
        nds = "type.googleapis.com/istio.networking.nds.v1.NameTable"
        health = "type.googleapis.com/istio.v1.HealthInformation"
        s = Stream(stub.StreamAggregatedResources)
        s.send(discovery_pb2.DiscoveryRequest(node=node(14), type_url=nds))
        r = s.recv()
        assert r.type_url == nds and len(r.resources) == 1, r
        assert r.resources[0].type_url == nds, r.resources[0].type_url
        s.send(discovery_pb2.DiscoveryRequest(type_url=nds, version_info=r.version_info, response_nonce=r.nonce))
        s.send(discovery_pb2.DiscoveryRequest(type_url=health))
        s.send(discovery_pb2.DiscoveryRequest(type_url=CDS))
        r = s.recv()
        assert r.type_url == CDS, r.type_url
        s.close()
        ecds = "networking.istio.io/v1alpha3/EnvoyFilter"
        s = Stream(stub.StreamAggregatedResources)
        s.send(discovery_pb2.DiscoveryRequest(node=node(12), type_url=ecds, resource_names=["x"]))
        try:
            r = s.recv()
            raise AssertionError(f"answered an unauthenticated caller: {r}")
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED, err.code()
            assert err.details() == "the api generator requires an authenticated control-plane identity", err.details()
        finally:
            s.close()
        meta = struct_pb2.Struct()
        meta.update({"NAMESPACE": "bookinfo", "GENERATOR": "grpc"})
        grpc_node = base_pb2.Node(id="sidecar~10.244.1.13~client-13.bookinfo~bookinfo.svc.cluster.local", metadata=meta)
        s = Stream(stub.StreamAggregatedResources)
        s.send(discovery_pb2.DiscoveryRequest(node=grpc_node, type_url=ecds, resource_names=["x"]))
        s.send(discovery_pb2.DiscoveryRequest(type_url=CDS))
        r = s.recv()
        assert r.type_url == CDS, r.type_url
        s.close()

    import urllib.parse  # noqa: F401 (used in sotw)

    check("sotw", sotw)
    check("delta", delta)
    check("sidecar_listeners", sidecar_listeners)
    check("missing_node", missing_node)
    check("unknown_types", unknown_types)
    channel.close()
    failed = sum(1 for _, e in results if e)
    for name, err in results:
        print(f"ok {name}" if err is None else f"FAIL {name}: {err}")
    print(f"{len(results) - failed} passed, {failed} failed")
    # Not sys.exit: the interpreter's final collection can run a call
    # object's __del__ while a stopped daemon thread of grpcio holds that
    # call's lock (grpc/_channel.py), which hung this script in CI.
    sys.stdout.flush()
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    main()
