# syntax=docker/dockerfile:1
# The mssql-cdc image: one binary built with `--profile dist` (stripped, no debug info, every
# object store: s3, gs, az), CA certificates, a non-root user. Entry point: the binary itself,
# so `docker run <image> demo` runs the demo and `docker run <image> run ...` runs connectors.
#
#   docker build -t mssql-cdc:dev .
#   docker run --rm -it mssql-cdc:dev demo --duration 60
#
# Size: see compose/README.md ("The image").

FROM rust:1.95-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential pkg-config libssl-dev zlib1g-dev python3 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --locked --profile dist --features gcs,azure \
 && cp target/dist/mssql-cdc /usr/local/bin/mssql-cdc

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/mssql-cdc --create-home mssql-cdc
COPY --from=build /usr/local/bin/mssql-cdc /usr/local/bin/mssql-cdc
USER 10001:10001
WORKDIR /var/lib/mssql-cdc
# /metrics, /health and the management API (telemetry.listen; bind 0.0.0.0 in a container).
EXPOSE 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 CMD ["mssql-cdc", "health"]
ENTRYPOINT ["mssql-cdc"]
CMD ["--help"]
