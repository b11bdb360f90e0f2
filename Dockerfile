# onejob: build with `docker build -t onejob .`, run with
# `docker run -p 8080:8080 onejob` (see docs/operations.md).

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src src
# Cargo.toml names the tokenizer's benchmark, so its source must be there.
COPY benches benches
COPY crates crates
COPY config config
COPY migrations migrations
# The TypeScript client's build, served to the demo page.
COPY clients/typescript/dist/index.js clients/typescript/dist/index.js
RUN cargo build --release --locked --bin onejob && strip target/release/onejob

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home --home-dir /var/lib/onejob onejob
COPY --from=build /src/target/release/onejob /usr/local/bin/onejob
USER onejob
WORKDIR /var/lib/onejob
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s CMD ["onejob", "probe", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["onejob"]
CMD ["serve", "--listen", "0.0.0.0:8080", "--allow-remote"]
