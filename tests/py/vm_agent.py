"""grpcio + xds-protos as a VM's istio-agent: one ADS stream over TLS
with a bearer token, as a proxy of a WorkloadGroup (AUTO_REGISTER_GROUP,
and PROXY_CONFIG with a readinessProbe, so its entry is health-checked),
asking for its clusters; then, line by line from stdin:

  healthy            a health report (type.googleapis.com/istio.v1.HealthInformation)
  unhealthy MESSAGE  a failed one (error_detail: INTERNAL, MESSAGE)
  quit               ends the stream

Prints one JSON line when the stream is answered ({"code": "OK",
"clusters": N} or the gRPC error), then "ok" after each command.

usage: vm_agent.py ADDR ROOT_PEM TOKEN NAMESPACE GROUP IP
"""

import json
import queue
import sys
import threading

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import struct_pb2
from google.rpc import status_pb2

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
HEALTH = "type.googleapis.com/istio.v1.HealthInformation"


def main():
    addr, root_path, token, namespace, group, ip = sys.argv[1:7]
    creds = grpc.ssl_channel_credentials(root_certificates=open(root_path, "rb").read())
    channel = grpc.secure_channel(addr, creds, options=[("grpc.ssl_target_name_override", "istiod.istio-system.svc")])
    meta = struct_pb2.Struct()
    meta.update({
        "NAMESPACE": namespace,
        "AUTO_REGISTER_GROUP": group,
        "ISTIO_VERSION": "1.28.0",
        "LABELS": {"version": "v1"},
        "PROXY_CONFIG": {"readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}},
    })
    node = base_pb2.Node(id=f"sidecar~{ip}~vm-1.{namespace}~{namespace}.svc.cluster.local", metadata=meta)
    node.locality.region = "us-east"
    node.locality.zone = "us-east-1a"
    q = queue.Queue()
    stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
    call = stub.StreamAggregatedResources(iter(q.get, None), metadata=[("authorization", "Bearer " + token)], timeout=120)
    q.put(discovery_pb2.DiscoveryRequest(node=node, type_url=CDS))
    try:
        resp = next(call)
    except grpc.RpcError as e:
        print(json.dumps({"code": e.code().name, "details": e.details()}), flush=True)
        return
    q.put(discovery_pb2.DiscoveryRequest(type_url=CDS, version_info=resp.version_info, response_nonce=resp.nonce))
    print(json.dumps({"code": "OK", "clusters": len(resp.resources)}), flush=True)
    # Later responses (pushes) are read and ACKed in the background.
    def drain():
        try:
            for r in call:
                q.put(discovery_pb2.DiscoveryRequest(type_url=r.type_url, version_info=r.version_info, response_nonce=r.nonce))
        except grpc.RpcError:
            pass
    threading.Thread(target=drain, daemon=True).start()
    for line in sys.stdin:
        cmd, _, rest = line.strip().partition(" ")
        if cmd == "healthy":
            q.put(discovery_pb2.DiscoveryRequest(type_url=HEALTH))
        elif cmd == "unhealthy":
            q.put(discovery_pb2.DiscoveryRequest(type_url=HEALTH, error_detail=status_pb2.Status(code=13, message=rest)))
        elif cmd == "quit":
            break
        print("ok", flush=True)
    q.put(None)
    call.cancel()
    print("ok", flush=True)


if __name__ == "__main__":
    main()
