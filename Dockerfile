# toolgate's image: built with docs/operations.md's build step, run as a non-root user.
#   docker build -t toolgate .
#   docker run -p 8080:8080 -v "$PWD/conf:/etc/toolgate:ro" -v toolgate-data:/var/lib/toolgate toolgate
# The build stage needs cmake (Pingora's build); the runtime image holds the binary, the CA roots
# and the default configuration (replace it by mounting your own conf/ on /etc/toolgate).
FROM rust:1.95-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake pkg-config libclang-dev libxml2-dev libxmlsec1-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# `.git` stays out of the image (.dockerignore): the commit for `toolgate_build_info` comes in
# as `--build-arg TOOLGATE_COMMIT=...` (build.rs; `unknown` without it).
ARG TOOLGATE_COMMIT
RUN cargo build --release --locked --bin toolgate

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libxml2 libxmlsec1 libxmlsec1-openssl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/toolgate --create-home toolgate
COPY --from=build /src/target/release/toolgate /usr/local/bin/toolgate
COPY conf/toolgate.yaml /etc/toolgate/toolgate.yaml
USER toolgate
# `storage.path: ./data` is /var/lib/toolgate/data: keep it on a volume.
WORKDIR /var/lib/toolgate
VOLUME ["/var/lib/toolgate"]
EXPOSE 8080 9090
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/toolgate", "--config", "/etc/toolgate/toolgate.yaml"]
