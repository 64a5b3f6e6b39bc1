# The operator's image: python -m agentihooks_swarm (run | records …).
#
#   docker build -t ghcr.io/agentihooks/agentihooks-swarm:0.1.0 .
#
# The chart (charts/agentihooks-swarm) runs it as user 10001 with a read-only root filesystem.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
# The package and its runtime dependencies only (no dev extras), in a venv the final stage copies.
RUN python -m venv /opt/agentihooks-swarm \
 && /opt/agentihooks-swarm/bin/pip install .

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/agentihooks-swarm/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 agentihooks \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin agentihooks
COPY --from=build /opt/agentihooks-swarm /opt/agentihooks-swarm
USER 10001:10001
# kopf's liveness endpoint and the Prometheus metrics (the chart's defaults).
EXPOSE 8080 9090
ENTRYPOINT ["python", "-m", "agentihooks_swarm"]
CMD ["run", "--all-namespaces", "--liveness=http://0.0.0.0:8080/healthz"]
