"""grpcio's own xDS resolver against pilot-discovery: proxyless gRPC
routing as a client no one here wrote sees it.

usage: grpc_xds.py BOOTSTRAP BACKEND_PORT SLICES_FILE

Starts two echo backends (127.0.0.2 = v1, 127.0.0.3 = v2) on BACKEND_PORT,
then dials xds:///echo.default.svc.cluster.local:7070 and checks:
  split     1,000 RPCs split 80/20 between subsets v1 and v2 (+-5 points)
  header    `x-route: v2` goes to v2 only
  fault     `x-fault: abort` fails with UNAVAILABLE (fault injection)
  follow    `x-all: yes` reaches both; with v2's endpoint removed from
            SLICES_FILE only v1, and both again once it is back
Prints "N passed, N failed".
"""

import concurrent.futures
import os
import sys
import time

BOOTSTRAP, PORT, SLICES = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.environ["GRPC_XDS_BOOTSTRAP"] = BOOTSTRAP

import grpc  # noqa: E402  (after the bootstrap is set)


def backend(ip, name):
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8))
    handler = grpc.method_handlers_generic_handler(
        "istiod.test.Echo", {"Who": grpc.unary_unary_rpc_method_handler(lambda req, ctx: name.encode())}
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"{ip}:{PORT}")
    server.start()
    return server


def main():
    servers = [backend("127.0.0.2", "v1"), backend("127.0.0.3", "v2")]
    channel = grpc.insecure_channel("xds:///echo.default.svc.cluster.local:7070")
    who = channel.unary_unary("/istiod.test.Echo/Who")
    results = []

    def call(md=()):
        return who(b"", metadata=md, timeout=10).decode()

    def check(name, fn):
        try:
            fn()
            results.append((name, None))
        except Exception as e:  # noqa: BLE001
            results.append((name, f"{type(e).__name__}: {e}"))

    def split():
        counts = {"v1": 0, "v2": 0}
        for _ in range(1000):
            counts[call()] += 1
        share = counts["v1"] / 10
        assert 75 <= share <= 85, f"v1 got {share}% (want 80 +- 5): {counts}"
        print(f"  split: {counts}")

    def header():
        got = {call((("x-route", "v2"),)) for _ in range(50)}
        assert got == {"v2"}, got

    def fault():
        try:
            call((("x-fault", "abort"),))
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e.code()
            return
        raise AssertionError("the fault did not abort the call")

    def follow():
        md = (("x-all", "yes"),)
        both = {call(md) for _ in range(40)}
        assert both == {"v1", "v2"}, both
        original = open(SLICES).read()
        kept = original.split("    # v2 endpoint")[0]
        with open(SLICES, "w") as f:
            f.write(kept)
        try:
            deadline = time.time() + 15
            while time.time() < deadline:
                if {call(md) for _ in range(20)} == {"v1"}:
                    break
                time.sleep(0.1)
            else:
                raise AssertionError("traffic still reaches v2 after its endpoint was removed")
        finally:
            with open(SLICES, "w") as f:
                f.write(original)
        deadline = time.time() + 15
        while time.time() < deadline:
            if "v2" in {call(md) for _ in range(20)}:
                return
            time.sleep(0.1)
        raise AssertionError("traffic did not come back to v2")

    # The first call waits for the xDS resources to arrive.
    check("first_call", lambda: call())
    check("split", split)
    check("header", header)
    check("fault", fault)
    check("follow", follow)
    channel.close()
    for s in servers:
        s.stop(0)
    failed = sum(1 for _, e in results if e)
    for name, err in results:
        print(f"ok {name}" if err is None else f"FAIL {name}: {err}")
    print(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
