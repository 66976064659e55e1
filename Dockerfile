# The pipeline-pulse image: a slim Debian base, the binary scripts/package.sh built (glibc 2.17,
# NVML loaded at run time: mount the driver's libnvidia-ml with the NVIDIA container toolkit
# to read GPUs), a non-root user, the metrics port. Built by scripts/package.sh with buildah;
# where the base cannot be pulled, it makes the base from Debian's packages under the same
# name first (mmdebstrap), so this file builds the same here and anywhere.
#
#   buildah bud --build-arg VERSION=0.1.0 -t pipeline-pulse:0.1.0 .
#   docker build --build-arg VERSION=0.1.0 -t pipeline-pulse:0.1.0 .
ARG BASE=docker.io/library/debian:bookworm-slim
FROM ${BASE}
ARG VERSION
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="pipeline-pulse" \
      org.opencontainers.image.description="Watches long-running LLM batch-inference jobs and serves their progress to Prometheus" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0" \
      org.opencontainers.image.documentation="README.md and docs/deploy.md in the source"
COPY target/package/pipeline-pulse-${VERSION}-x86_64-linux-gnu/pipeline-pulse /usr/local/bin/pipeline-pulse
# A numeric user (the base has no account to spare, and minbase has no useradd); the state
# directory is a volume it owns.
COPY --chown=65532:65532 deploy/container/state /var/lib/pipeline-pulse
USER 65532:65532
VOLUME /var/lib/pipeline-pulse
EXPOSE 9721
ENTRYPOINT ["/usr/local/bin/pipeline-pulse"]
CMD ["run", "--listen", "0.0.0.0:9721", "--state-dir", "/var/lib/pipeline-pulse"]
