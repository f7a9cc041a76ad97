# syntax=docker/dockerfile:1
# One image with the three ferrolb binaries. Build from the repository root:
#   docker build --build-arg FERROLB_REVISION=$(git rev-parse --short HEAD) -t REGISTRY/ferrolb:0.1.0 .
# The controller runs as the image's non-root user; the speaker and bootstrap pods run
# as root with only NET_ADMIN and NET_RAW (see manifests/), which Kubernetes grants to
# root only.

# The binaries that go into the image; api/tests/manifests.rs checks that they are
# exactly the workspace's shipped binaries and that the manifests run only these.
ARG BINARIES="ferrolb-controller ferrolb-speaker ferrolb-bootstrap"

FROM docker.io/library/rust:1.89-bookworm AS build
ARG BINARIES
# The revision --version and ferrolb_build_info name (buildinfo/build.rs); the build
# context has no .git, so without it they say "unknown":
#   docker build --build-arg FERROLB_REVISION=$(git rev-parse --short HEAD) -t ... .
ARG FERROLB_REVISION
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    set -eu; \
    bins=""; \
    for bin in $BINARIES; do bins="$bins --bin $bin"; done; \
    cargo build --release --locked $bins; \
    mkdir -p /out; \
    for bin in $BINARIES; do cp "target/release/$bin" /out/; done

# glibc, libgcc and CA certificates, no shell; "nonroot" is uid/gid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ferrolb-controller"]
