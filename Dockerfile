# syntax=docker/dockerfile:1
#
# xlb's image: one static binary, /xlb, on a distroless base. The eBPF
# objects are committed and embedded, so the build needs Go only (no
# clang). The same image runs every component; the Kubernetes manifests
# choose the subcommand (controller, agent, backend).
#
#   docker build -t REGISTRY/xlb:TAG --build-arg VERSION=TAG .
#
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ...
# (the eBPF objects are little-endian, so big-endian targets do not build).

FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first: this layer stays cached while only the sources change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY internal/ internal/
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/xlb ./cmd/xlb

# static-debian12: CA certificates, /etc/passwd with "nonroot" (65532),
# no shell, no libc. The controller runs as that user; the agent and
# backend DaemonSets run as root with the capabilities they need.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="xlb" \
      org.opencontainers.image.description="XDP/eBPF L4 load balancer with BGP and direct server return" \
      org.opencontainers.image.source="https://github.com/xlbproject/xlb" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/xlb /xlb
USER 65532:65532
ENTRYPOINT ["/xlb"]
