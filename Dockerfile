# hami: one image for every role (scheduler, node-agent, monitor), plus HAMi-core's libvgpu.so.
#
#   scripts/build-image            # docker or podman; prints the tag the chart uses by default
#   scripts/build-image --local    # buildah, no daemon, no Docker Hub: a Debian base made by mmdebstrap
#                                  # and a stand-in libvgpu.so (HAMICORE_STAGE=hamicore-standin)
#
# Stages: `wheel` builds hami's wheel and installs it into a venv (/opt/hami), `hamicore-source` builds
# HAMi-core (libvgpu.so) from source at a pinned commit in a CUDA devel image, `hamicore-standin` writes
# a stand-in library saying so in VERSION (for machines without nvcr.io/GitHub), `hamicore` is the one
# HAMICORE_STAGE picks; the final stage is the Python base with the venv copied in and the library:
# no compiler, no CUDA toolkit, no pip. See deploy/image/README.md for the choices.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
ARG CUDA_DEVEL_IMAGE=nvidia/cuda:12.4.1-devel-ubi8
ARG HAMICORE_STAGE=hamicore-source

# ---------------------------------------------------------------------------- the wheel, installed
# A venv, not the system site-packages: Debian's python3 refuses system pip installs (PEP 668), and the
# runtime stage copies one directory. pip and setuptools leave the venv before it is copied.
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
RUN python3 -m venv /opt/build && /opt/build/bin/pip install --no-cache-dir build==1.2.2
COPY pyproject.toml README.md ./
COPY hami ./hami
# hami/device/vendors.yaml is a link to config/vendors.yaml (one table, edited in config/).
COPY config/vendors.yaml ./config/vendors.yaml
# Dependencies from the hashed lock only (scripts/lock-image), then hami's wheel without resolving anything.
COPY constraints/image.lock ./constraints/image.lock
RUN /opt/build/bin/python -m build --wheel --outdir /dist . \
    && python3 -m venv /opt/hami \
    && /opt/hami/bin/pip install --no-cache-dir --require-hashes -r constraints/image.lock \
    && /opt/hami/bin/pip install --no-cache-dir --no-deps /dist/*.whl \
    && /opt/hami/bin/pip uninstall --yes --quiet pip setuptools

# ---------------------------------------------------------------------------- HAMi-core, from source
# Built on UBI 8 (glibc 2.28), as HAMi does: the library is preloaded into users' containers, so it
# must load against old C libraries too.
FROM ${CUDA_DEVEL_IMAGE} AS hamicore-source
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

# ---------------------------------------------------------------------------- HAMi-core, a stand-in
# Where nvcr.io and GitHub are out of reach: a well-formed ELF shared object that is NOT HAMi-core
# (hami.sim.kubelet.libstub, the embedded cluster's), so the agent's install path runs; VERSION says so and
# the node agent records it on the Node (hami.io/hami-core). Never deploy it to GPU nodes.
FROM wheel AS hamicore-standin
WORKDIR /src/HAMi-core
RUN /opt/hami/bin/python -c "from hami.sim.kubelet.libstub import write_stub_library as w; w('build/libvgpu.so', 'stand-in')" \
    && echo "stand-in-not-hami-core" > build/VERSION \
    && echo "Stand-in for HAMi-core's libvgpu.so (no HAMi-core code): build with HAMICORE_STAGE=hamicore-source." > LICENSE

# hadolint ignore=DL3006
FROM ${HAMICORE_STAGE} AS hamicore

# ---------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE}
ARG HAMI_VERSION=0.1.0
LABEL org.opencontainers.image.title="hami" \
      org.opencontainers.image.version="${HAMI_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.description="GPU sharing control plane for Kubernetes, wire-compatible with HAMi v2.10"
COPY --from=wheel /opt/hami /opt/hami
COPY --from=hamicore /src/HAMi-core/build/libvgpu.so /usr/local/lib/hami/vgpu/libvgpu.so
COPY --from=hamicore /src/HAMi-core/build/VERSION /usr/local/lib/hami/vgpu/VERSION
COPY --from=hamicore /src/HAMi-core/LICENSE /usr/local/share/doc/hami-core/LICENSE
# The node agent installs this library under --hook-path at start (the version comes from VERSION).
ENV PATH=/opt/hami/bin:$PATH \
    HAMI_VGPU_LIB=/usr/local/lib/hami/vgpu/libvgpu.so \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root by default (the scheduler runs so); the node DaemonSet runs its containers as root
# because they need the host (see deploy/image/README.md).
USER 65532:65532
ENTRYPOINT ["hami"]
CMD ["--help"]
