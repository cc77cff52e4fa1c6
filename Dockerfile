# syntax=docker/dockerfile:1
# istiod-rs as Istio's `pilot` image: the same binary path, entrypoint,
# user and ports, so Istio's Helm chart runs it unchanged (docs/install.md).
#
#   docker build -t <registry>/pilot:<tag>-rs .
#
# The build stage compiles the release binary and splits its debug info off
# (scripts/release): the image carries a ~30 MB binary; the DWARF stays in
# the build stage (`docker build --target build` and copy
# /out/pilot-discovery.debug out for gdb or perf).

FROM rust:1.95.0-bookworm AS build
WORKDIR /src
# binutils: objcopy, for the debug info split.
RUN apt-get update \
 && apt-get install -y --no-install-recommends binutils \
 && rm -rf /var/lib/apt/lists/*
COPY . .
# The version stamp (pilot-discovery version) without the .git directory:
# pass --build-arg ISTIOD_GIT_REVISION=$(git rev-parse HEAD).
ARG ISTIOD_GIT_REVISION=unknown
ARG ISTIOD_GIT_TAG=
ARG ISTIOD_BUILD_STATUS=Clean
ENV ISTIOD_GIT_REVISION=${ISTIOD_GIT_REVISION} \
    ISTIOD_GIT_TAG=${ISTIOD_GIT_TAG} \
    ISTIOD_BUILD_STATUS=${ISTIOD_BUILD_STATUS}
# The registry and target directory are cached between builds (BuildKit).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    OUT=/out scripts/release

# glibc, CA certificates and nothing else (no shell): as Istio's distroless
# base. The binary links glibc dynamically (2.36 in both bookworm images).
FROM gcr.io/distroless/cc-debian12
COPY --from=build /out/pilot-discovery /usr/local/bin/pilot-discovery
# istiod's defaults are relative (./etc/istio/config/mesh, ./etc/cacerts,
# ./var/lib/istio/inject): the chart mounts them under /, as istiod's image
# runs from /.
WORKDIR /
# istio-proxy's uid and gid, as Istio's pilot image runs.
USER 1337:1337
# What the chart's istiod container declares: debug, xDS, xDS over TLS,
# webhooks, monitoring.
EXPOSE 8080 15010 15012 15017 15014
ENTRYPOINT ["/usr/local/bin/pilot-discovery"]
