# syntax=docker/dockerfile:1
#
# One image, two binaries: /usr/local/bin/ingestor and /usr/local/bin/outbox-relay.
# The Helm chart picks the binary with `command:`; `docker run IMAGE` starts the
# ingestor.
#
#   docker build -t route-processing .
#   docker run --rm route-processing /usr/local/bin/outbox-relay stats

# Build: cgo is required: confluent-kafka-go links the static librdkafka it
# bundles for glibc linux/amd64 and linux/arm64, so build on glibc (bookworm)
# and run on glibc (distroless base, not static).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
# Migrations are embedded in the ingestor (go:embed): nothing else to copy.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/ingestor ./cmd/ingestor && \
    CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/outbox-relay ./cmd/outbox-relay

# Run: glibc, CA certificates, tzdata, no shell, user 65532 (nonroot).
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/ingestor /out/outbox-relay /usr/local/bin/
USER 65532:65532
EXPOSE 8080
CMD ["/usr/local/bin/ingestor"]
