"""Opens one ADS stream (grpcio + xds-protos) as a sidecar of a namespace
and asks for its clusters, over TLS with a bearer token and/or a client
certificate, or in the clear. Prints one JSON line: the gRPC status code
and details, and for an answer the number of clusters.

Usage: ads_auth.py ADDR (ROOT_PEM|-) (TOKEN|-) NAMESPACE (sotw|delta)[-empty]

Environment: ADS_CLIENT_KEY and ADS_CLIENT_CHAIN (PEM files) present a
client certificate; ADS_SERVICE_ACCOUNT sets the node's SERVICE_ACCOUNT.
"""

import json
import os
import sys
import threading

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import struct_pb2

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"


def main():
    addr, root_path, token, namespace, protocol = sys.argv[1:6]
    if root_path == "-":
        channel = grpc.insecure_channel(addr)
    else:
        root = open(root_path, "rb").read()
        key, chain = os.environ.get("ADS_CLIENT_KEY"), os.environ.get("ADS_CLIENT_CHAIN")
        if key and chain:
            creds = grpc.ssl_channel_credentials(
                root_certificates=root, private_key=open(key, "rb").read(), certificate_chain=open(chain, "rb").read()
            )
        else:
            creds = grpc.ssl_channel_credentials(root_certificates=root)
        channel = grpc.secure_channel(
            addr, creds, options=[("grpc.ssl_target_name_override", "istiod.istio-system.svc")]
        )
    meta = struct_pb2.Struct()
    meta.update({"NAMESPACE": namespace})
    sa = os.environ.get("ADS_SERVICE_ACCOUNT")
    if sa:
        meta.update({"SERVICE_ACCOUNT": sa})
    node = base_pb2.Node(id=f"sidecar~10.1.0.9~app-1.{namespace}~{namespace}.svc.cluster.local", metadata=meta)
    stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
    metadata = [] if token == "-" else [("authorization", "Bearer " + token)]
    done = threading.Event()

    empty = protocol.endswith("-empty")

    def requests(req):
        # The stream stays open until the answer is read, as a proxy's;
        # "-empty": half-closed before any request.
        if empty:
            return
        yield req
        done.wait(10)

    if protocol.startswith("delta"):
        req = discovery_pb2.DeltaDiscoveryRequest(node=node, type_url=CDS)
        call = stub.DeltaAggregatedResources(requests(req), metadata=metadata, timeout=10)
    else:
        req = discovery_pb2.DiscoveryRequest(node=node, type_url=CDS)
        call = stub.StreamAggregatedResources(requests(req), metadata=metadata, timeout=10)
    try:
        resp = next(call)
    except grpc.RpcError as e:
        done.set()
        print(json.dumps({"code": e.code().name, "details": e.details()}))
        return
    except StopIteration:
        done.set()
        print(json.dumps({"code": "OK", "details": "ended without an answer"}))
        return
    done.set()
    call.cancel()
    print(json.dumps({"code": "OK", "clusters": len(resp.resources)}))


if __name__ == "__main__":
    main()
