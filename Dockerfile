# syntax=docker/dockerfile:1
#
# kdesched: ONE image for every Knative function and for the standalone `kdesched serve`.
# The container's command picks what runs:
#   kdesched function NAME    one function (knative/base/services.yaml passes NAME in args)
#   kdesched function         the function named by $KDESCHED_FUNCTION (this image's default)
#   kdesched serve ...        the standalone reactor (knative/standalone/deployment.yaml)
# Every function listens on $PORT: Knative sets it (8080); outside Knative the default below.
#
# Build:  docker build -t my.registry/kdesched:0.1.0 .
# Run:    docker run --rm -e KDESCHED_FUNCTION=deadletter -p 8080:8080 my.registry/kdesched:0.1.0
#
# Two stages: the builder makes a virtual environment in /opt/venv with the exact versions of the
# whole transitive runtime set locked, with hashes, in requirements.lock, and kdesched itself
# (no dependency re-resolved); the final stage copies only that venv
# onto a fresh base, so no pip cache, no build frontend, no sources and no compilers ship.
# Every dependency ships as a wheel for this platform, so neither stage installs system packages.
# tests/deploy/test_dockerfile.py checks these properties and replays the builder's RUN steps.

# Pinned to an exact patch release and Debian release (a moving `3.11-slim` tag would change
# the interpreter and OS packages under the same Dockerfile). Pin a digest too for
# reproducible builds: --build-arg PYTHON_IMAGE=python:3.11.15-slim-bookworm@sha256:...
ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/venv
# Dependencies first, in their own layer (rebuilt only when the lock changes): every package of
# requirements.lock at its exact version, each file checked against its recorded hash, so two
# builds of this Dockerfile install the same bytes. The lock is written by pip-compile from
# pyproject.toml's ranges; tests/deploy/test_dockerfile.py checks that it still covers them.
COPY requirements.lock ./
RUN /opt/venv/bin/pip install --no-cache-dir --require-hashes -r requirements.lock
# Then kdesched itself (a regular, non-editable install; the build backend from
# [build-system] runs in pip's throw-away isolated environment).
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY functions ./functions
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kdesched" \
      org.opencontainers.image.description="Event-driven Kubernetes descheduler (Knative functions and kdesched serve)" \
      org.opencontainers.image.licenses="Apache-2.0"
# PYTHONUNBUFFERED: log lines reach `kubectl logs` at once, not when a buffer fills.
# PYTHONDONTWRITEBYTECODE: the root filesystem is read-only in the manifests; pip already
# compiled the bytecode at install time.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH \
    PORT=8080
# A numeric, unprivileged user: Kubernetes can only verify runAsNonRoot for a numeric UID.
RUN groupadd --system --gid 10001 kdesched \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin kdesched
COPY --from=builder /opt/venv /opt/venv
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["kdesched"]
CMD ["function"]
