"""grpcio (gRPC's C core via Python) as an independent client of the
istiod-rs HTTP/2 + gRPC layer, against the echo test service.

usage: grpcio_client.py ADDR [--tls-ca PEM]

Checks, each printed as "ok NAME" or "FAIL NAME: why":
  unary             one request, one response
  bidi              1,000 messages each way on one stream, sizes up to 4 MiB
  unimplemented     an unknown method gives UNIMPLEMENTED
  too_large         a message over 4 MiB gives RESOURCE_EXHAUSTED
  concurrent        50 unary calls in flight on one channel
Exit status 0 when all pass.
"""

import argparse
import concurrent.futures
import sys

import grpc

UNARY = "/istiod.test.Echo/Unary"
BIDI = "/istiod.test.Echo/Bidi"
MAX = 4 << 20


def sizes():
    for i in range(1000):
        if i % 100 == 99:
            yield MAX  # exactly the limit: accepted
        else:
            yield (i * 7919) % 30000 + 1


def body(i, n):
    return bytes([i % 251]) * n


def run(channel):
    results = []

    def check(name, fn):
        try:
            fn()
            results.append((name, None))
        except Exception as e:  # noqa: BLE001 - report every failure
            results.append((name, f"{type(e).__name__}: {e}"))

    def unary():
        got = channel.unary_unary(UNARY)(b"hello istiod-rs", timeout=10)
        assert got == b"hello istiod-rs", got

    def bidi():
        want = [body(i, n) for i, n in enumerate(sizes())]
        got = list(channel.stream_stream(BIDI)(iter(want), timeout=120))
        assert len(got) == len(want), f"{len(got)} responses for {len(want)} requests"
        for i, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"message {i} differs ({len(g)} vs {len(w)} bytes)"

    def unimplemented():
        try:
            channel.unary_unary("/istiod.test.Echo/Missing")(b"x", timeout=10)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNIMPLEMENTED, e.code()
            assert "/istiod.test.Echo/Missing" in e.details(), e.details()
            return
        raise AssertionError("call succeeded")

    def too_large():
        try:
            channel.unary_unary(UNARY)(b"x" * (MAX + 1), timeout=30)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.code()
            assert "larger than max" in e.details(), e.details()
            return
        raise AssertionError("call succeeded")

    def concurrent_calls():
        call = channel.unary_unary(UNARY)
        with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
            futs = [pool.submit(call, f"call {i}".encode(), timeout=20) for i in range(50)]
            for i, f in enumerate(futs):
                assert f.result() == f"call {i}".encode()

    check("unary", unary)
    check("bidi", bidi)
    check("unimplemented", unimplemented)
    check("too_large", too_large)
    check("concurrent", concurrent_calls)
    # A server that broke on the oversized message would fail this.
    check("unary_after_errors", unary)
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("--tls-ca")
    args = ap.parse_args()
    opts = [
        ("grpc.max_send_message_length", 2 * MAX),
        ("grpc.max_receive_message_length", 2 * MAX),
    ]
    if args.tls_ca:
        with open(args.tls_ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        target = args.addr.replace("127.0.0.1", "localhost")
        channel = grpc.secure_channel(target, creds, options=opts)
    else:
        channel = grpc.insecure_channel(args.addr, options=opts)
    grpc.channel_ready_future(channel).result(timeout=10)
    results = run(channel)
    channel.close()
    failed = 0
    for name, err in results:
        if err is None:
            print(f"ok {name}")
        else:
            failed += 1
            print(f"FAIL {name}: {err}")
    print(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
