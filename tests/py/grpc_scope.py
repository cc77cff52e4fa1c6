"""Sidecar scoping as grpcio's xDS resolver sees it.

usage: grpc_scope.py BOOTSTRAP BACKEND_PORT reach|hidden

Starts echo backends on 127.0.0.2 and 127.0.0.3 (the mesh splits between
them) at BACKEND_PORT and dials
xds:///echo.default.svc.cluster.local:7070 with the node in BOOTSTRAP.
`reach`: the RPC succeeds. `hidden`: the proxy's Sidecar does not list the
host, so the server withholds its listener (grpc may log that the LDS
resource does not exist) and the RPC fails: UNAVAILABLE, or
DEADLINE_EXCEEDED while the channel has no configuration.
Prints "ok" or the reason, and exits non-zero on a mismatch.
"""

import concurrent.futures
import os
import sys

BOOTSTRAP, PORT, EXPECT = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.environ["GRPC_XDS_BOOTSTRAP"] = BOOTSTRAP

import grpc  # noqa: E402  (after the bootstrap is set)


def main():
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler(
        "istiod.test.Echo", {"Who": grpc.unary_unary_rpc_method_handler(lambda req, ctx: b"echo")}
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.2:{PORT}")
    server.add_insecure_port(f"127.0.0.3:{PORT}")
    server.start()
    channel = grpc.insecure_channel("xds:///echo.default.svc.cluster.local:7070")
    who = channel.unary_unary("/istiod.test.Echo/Who")
    try:
        got = who(b"", timeout=15 if EXPECT == "reach" else 5).decode()
        outcome = f"reached {got}"
        ok = EXPECT == "reach"
    except grpc.RpcError as e:
        outcome = f"{e.code().name}: {e.details()}"
        ok = EXPECT == "hidden" and e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    print(("ok: " if ok else "MISMATCH: ") + f"expected {EXPECT}, {outcome}")
    channel.close()
    server.stop(None)
    sys.exit(0 if ok else 1)


main()
