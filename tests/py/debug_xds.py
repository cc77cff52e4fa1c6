"""Debug over xDS as istioctl asks for it in a cluster (istioctl/pkg/xds/
client.go GetXdsResponse: an ADS stream over TLS with a bearer token, a node
with generator "event", one DiscoveryRequest of the debug type, one answer).

A sidecar of namespace bookinfo (SIDECAR_TOKEN) stays connected meanwhile,
so there is someone to report on. The caller (CALLER_TOKEN, of CALLER_NS)
then asks:
- istio.io/debug/syncz (statusgen.go): ClientConfigs, unpacked;
- istio.io/debug/config_dump for the sidecar: the types of its parts;
- istio.io/debug "syncz" and "adsz" (debuggen.go): the body, or the status;
  and istiod-rs's "whatif?config=..." (a PeerAuthentication), under "whatif".
Over PLAIN_ADDR (no TLS, no token) it asks istio.io/debug/syncz once more.

Prints one JSON object.

Usage: debug_xds.py TLS_ADDR PLAIN_ADDR ROOT_PEM SIDECAR_TOKEN CALLER_TOKEN CALLER_NS
"""

import gc
import json
import os
import queue
import sys
import threading
import time
import urllib.parse

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from envoy.service.status.v3 import csds_pb2
from google.protobuf import struct_pb2

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
SIDECAR = "app-1.bookinfo"


def channel(addr, root):
    if root is None:
        return grpc.insecure_channel(addr)
    creds = grpc.ssl_channel_credentials(root_certificates=root)
    return grpc.secure_channel(addr, creds, options=[("grpc.ssl_target_name_override", "istiod.istio-system.svc")])


def node(pod, namespace, generator=None):
    meta = struct_pb2.Struct()
    meta.update({"NAMESPACE": namespace, "ISTIO_VERSION": "1.28.0"})
    if generator:
        meta.update({"GENERATOR": generator})
    return base_pb2.Node(id=f"sidecar~10.1.0.9~{pod}.{namespace}~{namespace}.svc.cluster.local", metadata=meta)


def ask(stub, token, req):
    """One request, one answer (or the status), as adsc's WaitVersion."""
    done = threading.Event()

    def requests():
        yield req
        done.wait(10)

    metadata = [] if token is None else [("authorization", "Bearer " + token)]
    call = stub.StreamAggregatedResources(requests(), metadata=metadata, timeout=10)
    try:
        return next(call), None
    except grpc.RpcError as e:
        return None, {"code": e.code().name, "details": e.details()}
    finally:
        done.set()
        call.cancel()


def main():
    # The cyclic collector may run a call object's __del__ while grpcio holds
    # that call's lock (grpc/_channel.py), which deadlocked this script once
    # in CI; a short script can leave cycles to the end.
    gc.disable()
    tls_addr, plain_addr, root_path, sidecar_token, caller_token, caller_ns = sys.argv[1:7]
    root = open(root_path, "rb").read()
    stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel(tls_addr, root))

    # The sidecar: connected, its clusters received and ACKed, until the end.
    connected, leave = threading.Event(), threading.Event()
    acks = queue.Queue()

    def sidecar_requests():
        yield discovery_pb2.DiscoveryRequest(node=node("app-1", "bookinfo"), type_url=CDS)
        yield acks.get(timeout=10)
        leave.wait(20)

    sidecar = stub.StreamAggregatedResources(
        sidecar_requests(), metadata=[("authorization", "Bearer " + sidecar_token)], timeout=20
    )

    def hold():
        try:
            for r in sidecar:
                if not connected.is_set():
                    acks.put(discovery_pb2.DiscoveryRequest(
                        type_url=CDS, version_info=r.version_info, response_nonce=r.nonce))
                    time.sleep(0.2)
                connected.set()
        except grpc.RpcError:
            connected.set()

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert connected.wait(10), "the sidecar got no clusters"

    me = node("istioctl", caller_ns, generator="event")
    out = {}

    resp, err = ask(stub, caller_token, discovery_pb2.DiscoveryRequest(node=me, type_url="istio.io/debug/syncz"))
    if err:
        out["syncz"] = err
    else:
        rows = []
        for a in resp.resources:
            c = csds_pb2.ClientConfig()
            assert a.Unpack(c), a.type_url
            rows.append({
                "id": c.node.id,
                "meta": dict(c.node.metadata),
                "types": {g.type_url: csds_pb2.ConfigStatus.Name(g.config_status) for g in c.generic_xds_configs},
                "sent": all(g.last_updated.seconds > 0 for g in c.generic_xds_configs),
            })
        out["syncz"] = {"type_url": resp.type_url, "rows": rows,
                        "control_plane": json.loads(resp.control_plane.identifier)}

    resp, err = ask(stub, caller_token, discovery_pb2.DiscoveryRequest(
        node=me, type_url="istio.io/debug/config_dump", resource_names=[SIDECAR]))
    out["config_dump"] = err or [a.type_url for a in resp.resources]

    out["debug"] = {}
    # istiod-rs's what-if (beyond istiod): the question in ?config=.
    question = ("apiVersion: security.istio.io/v1\nkind: PeerAuthentication\n"
                "metadata: {name: whatif, namespace: bookinfo}\nspec: {mtls: {mode: STRICT}}\n")
    whatif = "whatif?diff=false&config=" + urllib.parse.quote(question, safe="")
    for name in ("syncz", "adsz", f"config_dump?proxyID={SIDECAR}", whatif):
        resp, err = ask(stub, caller_token, discovery_pb2.DiscoveryRequest(
            node=me, type_url="istio.io/debug", resource_names=[name]))
        if err:
            out["debug"][name.split("?")[0] if name is whatif else name] = err
        else:
            r = resp.resources[0]
            text = r.value.decode()
            try:
                body = json.loads(text)
            except ValueError:
                body = text
            out["debug"][name.split("?")[0] if name is whatif else name] = {"type_url": r.type_url, "body": body}

    plain = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel(plain_addr, None))
    _, err = ask(plain, None, discovery_pb2.DiscoveryRequest(node=me, type_url="istio.io/debug/syncz"))
    out["plaintext_syncz"] = err

    leave.set()
    sidecar.cancel()
    print(json.dumps(out))
    # Not a normal exit: the interpreter's final collection can deadlock on
    # a grpcio call's lock (see ads_binary.py).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
