# refill's container image, for people with Docker (or Podman, Buildah):
#   docker build -t <registry>/refill:<version> .
# Without Docker, e2e/images/refill-image.sh writes the same image as an OCI
# archive. Either way the image holds one static binary and nothing else.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# Static: the image has no C library to link against at run time.
RUN RUSTFLAGS='-C target-feature=+crt-static' \
    cargo build --release --locked --target x86_64-unknown-linux-gnu --bin refill

FROM scratch
COPY --from=build /src/target/x86_64-unknown-linux-gnu/release/refill /refill
USER 65532:65532
ENTRYPOINT ["/refill"]
