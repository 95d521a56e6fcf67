# Switchyard container image: build in a Rust image, run from a small Debian base as a
# non-root user. Build: docker build -t switchyard .
# Run: mount the routing config at /etc/switchyard/gateway.yaml (listen on 0.0.0.0:8080).
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Dependencies first, so source edits do not rebuild them.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo build --release --locked && rm -rf src
COPY src ./src
RUN touch src/main.rs src/lib.rs && cargo build --release --locked \
    && strip target/release/switchyard

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin switchyard
COPY --from=build /src/target/release/switchyard /usr/local/bin/switchyard
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/switchyard"]
CMD ["run", "--config", "/etc/switchyard/gateway.yaml"]
