"""Golden files of the debug endpoints istioctl and operators read, from a
fixed mesh (examples/bookinfo) with one sidecar synced over grpcio.

Field names are istiod's (pilot/pkg/xds/debug.go):
  /debug/syncz    []SyncStatus: cluster_id, proxy, proxy_type,
                  istio_version, {cluster,listener,route,endpoint}_{sent,acked},
                  resources (map of type URL to ResourceStatus: sent, acked,
                  sentTime, lastError), omitempty as Go leaves them out
  /debug/adsz     AdsClients: totalClients, clients[] of AdsClient:
                  connectionId, connectedAt, address, labels, metadata,
                  locality, watches (istiod-rs's extras under istiodRs)
  /debug/configz  []kubernetesConfig: crd.ConvertConfig's apiVersion, kind,
                  metadata, spec

What differs from run to run (nonces, times, the client's address, the
connection counter) is replaced by a placeholder before comparing.

usage: debug_golden.py GRPC_ADDR HTTP_ADDR GOLDEN_DIR [--update]
Prints "N passed, N failed".
"""

import json
import pathlib
import queue
import re
import sys
import urllib.request

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import struct_pb2

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
LDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
RDS = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
REVIEWS = "outbound|9080||reviews.bookinfo.svc.cluster.local"

VOLATILE_KEYS = {"connectedAt", "address", "sentTime"}
NONCE_KEYS = re.compile(r"(_sent|_acked|^sent$|^acked$|[Nn]once)")


def normalize(v, key=""):
    if isinstance(v, dict):
        return {k: normalize(x, k) for k, x in v.items()}
    if isinstance(v, list):
        return [normalize(x, key) for x in v]
    if isinstance(v, str) and v:
        if key in VOLATILE_KEYS:
            return f"<{key}>"
        if NONCE_KEYS.search(key):
            return "<nonce>"
        if key == "connectionId":
            return re.sub(r"-\d+$", "-<n>", v)
    return v


def get(addr, path):
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=10) as r:
        return json.loads(r.read())


def main():
    grpc_addr, http_addr, golden = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    update = "--update" in sys.argv
    stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(grpc.insecure_channel(grpc_addr))
    q = queue.Queue()
    responses = stub.StreamAggregatedResources(iter(q.get, None), timeout=30)
    meta = struct_pb2.Struct()
    meta.update({"NAMESPACE": "bookinfo", "ISTIO_VERSION": "1.28.0", "CLUSTER_ID": "Kubernetes",
                 "LABELS": {"app": "productpage", "version": "v1"}})
    node = base_pb2.Node(id="sidecar~10.244.1.10~productpage-v1-5f7c9d8b46-q7xkz.bookinfo~bookinfo.svc.cluster.local",
                         metadata=meta)
    # Envoy's order: CDS and LDS wildcard, then EDS and RDS by name, every
    # response ACKed.
    first = True
    for type_url, names in ((CDS, []), (EDS, [REVIEWS]), (LDS, []), (RDS, ["9080"])):
        q.put(discovery_pb2.DiscoveryRequest(node=node if first else None, type_url=type_url, resource_names=names))
        first = False
        r = next(responses)
        assert r.type_url == type_url, (r.type_url, type_url)
        q.put(discovery_pb2.DiscoveryRequest(type_url=type_url, resource_names=names, version_info=r.version_info,
                                             response_nonce=r.nonce))
    # Every ACK seen: all four types SYNCED.
    for _ in range(100):
        rows = get(http_addr, "/debug/syncz")
        if rows and all(rows[0].get(f"{t}_acked") for t in ("cluster", "listener", "route", "endpoint")):
            break
        import time

        time.sleep(0.05)
    found = {
        "syncz": rows,
        "adsz": get(http_addr, "/debug/adsz"),
        "configz": get(http_addr, "/debug/configz"),
    }
    q.put(None)
    passed = failed = 0
    golden.mkdir(parents=True, exist_ok=True)
    for name, value in found.items():
        text = json.dumps(normalize(value), indent=2, sort_keys=True) + "\n"
        path = golden / f"{name}.json"
        if update:
            path.write_text(text)
            print(f"wrote {path}")
            passed += 1
        elif path.exists() and path.read_text() == text:
            print(f"ok {name}")
            passed += 1
        else:
            failed += 1
            print(f"FAIL {name}: differs from {path} (UPDATE_GOLDEN=1 to rewrite, then review)\n{text}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
