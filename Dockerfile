# syntax=docker/dockerfile:1
# Multi-stage build: a static throttler binary in a distroless image that
# runs as a non-root user.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/throttler ./cmd/throttler

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/throttler /usr/local/bin/throttler
USER nonroot:nonroot
# Configure with NATS_URL, REDIS_URL and THROTTLER_* variables (see README).
ENTRYPOINT ["/usr/local/bin/throttler"]
