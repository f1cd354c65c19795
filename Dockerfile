# syntax=docker/dockerfile:1
#
# One image, two binaries: /usr/local/bin/ingestor and /usr/local/bin/outbox-relay.
# The Helm chart picks the binary with `command:`; `docker run IMAGE` starts the
# ingestor.
#
#   docker build -t route-processing \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" .
#   docker run --rm route-processing /usr/local/bin/outbox-relay stats
#
# `make image` builds the same image without Docker (scripts/image.sh): it
# stages the same /out tree on the host and runs THIS FILE's final stage,
# verbatim, with buildah. The final stage is therefore the one home of the
# image's layout, user and labels; scripts/imagetest checks that the built
# image holds exactly the files its COPY lines declare.

# Build: fully static binaries (musl; confluent-kafka-go bundles a musl
# librdkafka for linux/amd64 and linux/arm64), so the run stage is scratch.
FROM golang:1.26-bookworm AS build
RUN apt-get update -q && apt-get install -y -q --no-install-recommends musl-tools ca-certificates
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
# Migrations are embedded in the ingestor (go:embed): nothing else to copy.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    bash scripts/image.sh stage /out

# Run: the two static binaries, CA certificates, a passwd/group naming the
# non-root user 65532; no shell, no libc. Keep every line of this stage
# buildah-compatible: scripts/image.sh runs it as is.
FROM scratch
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.title="pcp-route-processing" \
      org.opencontainers.image.source="https://github.com/pcp/route-processing" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=build /out/etc/passwd /out/etc/group /etc/
COPY --from=build /out/etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/
COPY --from=build /out/usr/local/bin/ingestor /out/usr/local/bin/outbox-relay /usr/local/bin/
USER 65532:65532
EXPOSE 8080
CMD ["/usr/local/bin/ingestor"]
