# The operator's image: agentihooks-swarm run | records | worker.
#
#   docker build -t ghcr.io/agentihooks/agentihooks-swarm:0.1.0 .
#
# Offline (no registry, no index): a base made from Debian's packages as PYTHON_IMAGE and the
# wheels in the build context's wheels/ (tests/support/images.py prepares both), e.g.
#
#   buildah bud --pull=never --network=none --build-arg PYTHON_IMAGE=localhost/… CONTEXT
#
# PYTHON_IMAGE needs python3 with its venv module (Debian: python3 and python3-venv). Pin it by
# digest for a reproducible base (docs/security.md, "Supply chain"), e.g.
#
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:DIGEST .
#
# The default is a tag until a digest is filled in here.
# The chart (charts/agentihooks-swarm) runs it as user 10001 with a read-only root filesystem.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# .dockerignore lets in pyproject.toml, README.md, the lock files, operator/ and (offline only)
# wheels/.
COPY . .
# The runtime dependencies exactly as requirements.lock pins them, each file checked against its
# sha256 (make lock writes both locks), then the build backend from requirements-build.lock, then
# the package itself without dependencies and without build isolation (an isolated build would
# fetch setuptools unhashed). Nothing unpinned enters the venv; pip and setuptools leave it.
# With wheels/ present, pip uses it instead of the package index.
RUN python3 -m venv /opt/agentihooks-swarm \
 && if [ -d wheels ]; then set -- --no-index --find-links=wheels; fi \
 && pip=/opt/agentihooks-swarm/bin/pip \
 && $pip install "$@" --require-hashes --no-deps -r requirements.lock \
 && $pip install "$@" --require-hashes --no-deps -r requirements-build.lock \
 && $pip install "$@" --no-deps --no-build-isolation . \
 && $pip check \
 && $pip uninstall --yes --quiet pip setuptools

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/agentihooks-swarm/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
RUN groupadd --system --gid 10001 agentihooks \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin agentihooks
COPY --from=build /opt/agentihooks-swarm /opt/agentihooks-swarm
USER 10001:10001
# kopf's liveness endpoint and the Prometheus metrics (the chart's defaults).
EXPOSE 8080 9090
# `python` (the venv's) is on PATH too, for `kubectl exec … -- python -c …`.
ENTRYPOINT ["agentihooks-swarm"]
CMD ["run", "--all-namespaces", "--liveness=http://0.0.0.0:8080/healthz"]
