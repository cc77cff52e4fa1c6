"""grpcio + xds-protos as istio-agent's NDS client: opens an ADS stream as
a sidecar (LDS first, as the agent does), then asks for the name table
(type.googleapis.com/istio.networking.nds.v1.NameTable, no names) and
ACKs each response. Prints one JSON line per NDS response received:
{"version", "nonce", "resources": [{"type_url", "value": <base64>}]}: the
Rust test decodes the table with the project's own NDS proto.

usage: nds_watch.py GRPC_ADDR NODE_JSON COUNT
Exits after COUNT NDS responses, or fails after 30 s without one.
"""

import base64
import json
import queue
import sys
import threading

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import struct_pb2

LDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
NDS = "type.googleapis.com/istio.networking.nds.v1.NameTable"


def main():
    addr, spec, count = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    meta = struct_pb2.Struct()
    meta.update(spec.get("metadata", {}))
    node = base_pb2.Node(id=spec["id"], metadata=meta)
    q = queue.Queue()
    with grpc.insecure_channel(addr) as ch:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(ch)
        responses = stub.StreamAggregatedResources(iter(q.get, None), timeout=60)
        q.put(discovery_pb2.DiscoveryRequest(type_url=LDS, node=node))
        q.put(discovery_pb2.DiscoveryRequest(type_url=NDS))
        seen = 0
        timer = threading.Timer(30, lambda: (print("no NDS response in 30 s", file=sys.stderr), sys.stderr.flush(), __import__("os")._exit(3)))
        timer.start()
        for r in responses:
            q.put(discovery_pb2.DiscoveryRequest(
                type_url=r.type_url, version_info=r.version_info, response_nonce=r.nonce,
                resource_names=[]))
            if r.type_url != NDS:
                continue
            out = {
                "version": r.version_info,
                "nonce": r.nonce,
                "resources": [{"type_url": a.type_url, "value": base64.b64encode(a.value).decode()} for a in r.resources],
            }
            print(json.dumps(out), flush=True)
            seen += 1
            timer.cancel()
            if seen >= count:
                break
            timer = threading.Timer(30, lambda: (print("no further NDS response in 30 s", file=sys.stderr), sys.stderr.flush(), __import__("os")._exit(3)))
            timer.start()
        q.put(None)


if __name__ == "__main__":
    main()
