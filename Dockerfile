# The svc-proxy sidecar image for builders with a container engine; GoReleaser's dockers_v2 step builds
# it on release from the release binaries (it puts linux/amd64/svc-proxy and linux/arm64/svc-proxy in the
# context). `make image` builds the same shape from Debian's packages without an engine (docs/image.md).
FROM gcr.io/distroless/cc-debian12:nonroot
ARG TARGETPLATFORM
COPY $TARGETPLATFORM/svc-proxy /usr/bin/svc-proxy
USER 65532:65532
ENTRYPOINT ["/usr/bin/svc-proxy"]
