# The operator's image: agentihooks-swarm run | records | worker.
#
#   docker build -t ghcr.io/agentihooks/agentihooks-swarm:0.1.0 .
#
# Offline (no registry, no index): a base made from Debian's packages as PYTHON_IMAGE and the
# wheels in the build context's wheels/ (tests/support/images.py prepares both), e.g.
#
#   buildah bud --pull=never --network=none --build-arg PYTHON_IMAGE=localhost/… CONTEXT
#
# PYTHON_IMAGE needs python3 with its venv module (Debian: python3 and python3-venv).
# The chart (charts/agentihooks-swarm) runs it as user 10001 with a read-only root filesystem.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# .dockerignore lets in pyproject.toml, README.md, operator/ and (offline only) wheels/.
COPY . .
# The package and its runtime dependencies only (no dev extras), in a venv the final stage copies,
# without pip and setuptools. With wheels/ present, pip uses it instead of the package index.
RUN python3 -m venv /opt/agentihooks-swarm \
 && if [ -d wheels ]; then set -- --no-index --find-links=wheels; fi \
 && /opt/agentihooks-swarm/bin/pip install "$@" . \
 && /opt/agentihooks-swarm/bin/pip uninstall --yes --quiet pip setuptools

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
