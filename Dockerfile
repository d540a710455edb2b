# hami: one image for every role (scheduler, node-agent, monitor), plus HAMi-core's libvgpu.so.
#
#   scripts/build-image            # docker or podman; prints the tag the chart uses by default
#
# Stages: `wheel` builds hami's wheel, `hamicore` builds HAMi-core (libvgpu.so) from source at a pinned
# commit in a CUDA devel image, the final stage is a slim Python with the wheel installed and the
# library copied in: no compiler, no CUDA toolkit. See deploy/image/README.md for the choices.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
ARG CUDA_DEVEL_IMAGE=nvidia/cuda:12.4.1-devel-ubi8

# ---------------------------------------------------------------------------- the wheel
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
RUN pip install --no-cache-dir build==1.2.2
COPY pyproject.toml README.md ./
COPY hami ./hami
RUN python -m build --wheel --outdir /dist .

# ---------------------------------------------------------------------------- HAMi-core
# Built on UBI 8 (glibc 2.28), as HAMi does: the library is preloaded into users' containers, so it
# must load against old C libraries too.
FROM ${CUDA_DEVEL_IMAGE} AS hamicore
ARG HAMI_CORE_REPO=https://github.com/Project-HAMi/HAMi-core.git
ARG HAMI_CORE_COMMIT=39b2cbd085ff4fad25b4e7e4509f4ef07a2d1567
# hadolint ignore=DL3041
RUN dnf install -y cmake git make && dnf clean all
WORKDIR /src/HAMi-core
RUN git init -q . && git remote add origin "${HAMI_CORE_REPO}" \
    && git fetch -q --depth 1 origin "${HAMI_CORE_COMMIT}" && git checkout -q FETCH_HEAD \
    && bash ./build.sh \
    && test -s build/libvgpu.so \
    && git rev-parse --short=12 HEAD > build/VERSION

# ---------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE}
ARG HAMI_VERSION=0.1.0
LABEL org.opencontainers.image.title="hami" \
      org.opencontainers.image.version="${HAMI_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.description="GPU sharing control plane for Kubernetes, wire-compatible with HAMi v2.10"
COPY --from=wheel /dist/*.whl /tmp/wheels/
RUN pip install --no-cache-dir /tmp/wheels/*.whl && rm -rf /tmp/wheels
COPY --from=hamicore /src/HAMi-core/build/libvgpu.so /usr/local/lib/hami/vgpu/libvgpu.so
COPY --from=hamicore /src/HAMi-core/build/VERSION /usr/local/lib/hami/vgpu/VERSION
COPY --from=hamicore /src/HAMi-core/LICENSE /usr/local/share/doc/hami-core/LICENSE
# The node agent installs this library under --hook-path at start (the version comes from VERSION).
ENV HAMI_VGPU_LIB=/usr/local/lib/hami/vgpu/libvgpu.so \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root by default (the scheduler runs so); the node DaemonSet runs its containers as root
# because they need the host (see deploy/image/README.md).
USER 65532:65532
ENTRYPOINT ["hami"]
CMD ["--help"]
