"""A type the server does not serve, when ENABLE_XDS_API_GENERATOR_AUTH is
off: istiod's api generator (pilot/pkg/networking/apigen/apigen.go)
answers with the config it has of that type, none, once; the ACK gets no
second answer and the stream goes on.

argv: the xDS address. Prints "ok" or raises.
"""

import queue
import sys

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import struct_pb2

CONFIG = "networking.istio.io/v1alpha3/EnvoyFilter"  # a config type, for the api generator
CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"


def main():
    stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(grpc.insecure_channel(sys.argv[1]))
    q = queue.Queue()
    responses = stub.StreamAggregatedResources(iter(q.get, None), timeout=30)
    meta = struct_pb2.Struct()
    meta.update({"NAMESPACE": "bookinfo"})
    node = base_pb2.Node(id="sidecar~10.244.1.20~p-20.bookinfo~bookinfo.svc.cluster.local", metadata=meta)
    q.put(discovery_pb2.DiscoveryRequest(node=node, type_url=CONFIG, resource_names=["x"]))
    r = next(responses)
    assert r.type_url == CONFIG and r.nonce and not r.resources, r
    q.put(discovery_pb2.DiscoveryRequest(type_url=CONFIG, resource_names=["x"], version_info=r.version_info, response_nonce=r.nonce))
    q.put(discovery_pb2.DiscoveryRequest(type_url=CDS))
    r = next(responses)
    assert r.type_url == CDS and r.resources, r.type_url
    q.put(None)
    print("ok")


if __name__ == "__main__":
    main()
