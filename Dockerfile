# Switchyard container image: build in a Rust image, run from a small Debian base as a
# non-root user. Build: docker build -t switchyard .
# Run: mount the routing config at /etc/switchyard/gateway.yaml (listen on 0.0.0.0:8080).
# The base image's Rust is the version rust-toolchain.toml pins (that file is not copied in:
# the image's toolchain is the one to use).
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Dependencies first, so source edits do not rebuild them.
# (The workspace's load generator only needs its manifest here; it is not built.)
COPY Cargo.toml Cargo.lock ./
COPY demo-server/Cargo.toml demo-server/Cargo.toml
COPY loadtest/Cargo.toml loadtest/Cargo.toml
RUN mkdir -p src demo-server/src loadtest/src \
    && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && echo 'fn main() {}' > demo-server/src/main.rs && touch demo-server/src/lib.rs \
    && echo 'fn main() {}' > loadtest/src/main.rs \
    && cargo build --release --locked -p switchyard -p switchyard-demo-server \
    && rm -rf src demo-server/src
COPY src ./src
# Redis keyspace migrations are compiled into the binary.
COPY migrations ./migrations
# The demo MCP server: the default config of the chart and the example manifests use it as a
# stdio upstream.
COPY demo-server/src ./demo-server/src
RUN touch src/main.rs src/lib.rs demo-server/src/main.rs demo-server/src/lib.rs \
    && cargo build --release --locked -p switchyard -p switchyard-demo-server \
    && strip target/release/switchyard target/release/switchyard-demo-server

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin switchyard
COPY --from=build /src/target/release/switchyard /usr/local/bin/switchyard
COPY --from=build /src/target/release/switchyard-demo-server /usr/local/bin/switchyard-demo-server
USER 10001:10001
EXPOSE 8080
# Liveness of the MCP listener (the image has no curl: the binary probes itself).
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/switchyard", "probe", "--url", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/usr/local/bin/switchyard"]
CMD ["run", "--config", "/etc/switchyard/gateway.yaml"]
