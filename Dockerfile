# kv-planner: one image for both cluster processes, chosen by the first argument:
#   python -m admission webhook  --port 8443 --tls-cert-file F --tls-key-file F --policy-file F --metrics-port 9090
#   python -m admission exporter --port 9400 (--targets URL... | --discover | --prometheus-url URL) --retune off|recommend|apply
# Build from the repository root:  docker build -t <registry>/kv-planner:<version> .
# then push it and set the chart's image.repository / image.tag (see docs/chart.md).

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# --- build: turn the repository into a wheel and install it with its dependencies into a venv ------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_NO_INPUT=1
WORKDIR /src
# Only what the package build needs: a change to tests or docs does not invalidate this layer.
COPY pyproject.toml README.md ./
COPY planner ./planner
COPY admission ./admission
# Every dependency ships manylinux wheels (--only-binary), so no compiler is installed in any stage.
RUN python -m venv /opt/kv-planner \
    && /opt/kv-planner/bin/pip install --no-cache-dir --only-binary=:all: --upgrade "pip>=24" \
    && /opt/kv-planner/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && /opt/kv-planner/bin/pip install --no-cache-dir --only-binary=:all: /wheels/kv_planner-*.whl \
    && /opt/kv-planner/bin/pip uninstall --yes pip \
    && find /opt/kv-planner -name '__pycache__' -type d -prune -exec rm -rf {} +

# --- runtime: the venv on a clean slim base, as an unprivileged numeric user -----------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kv-planner" \
      org.opencontainers.image.description="kv-planner admission webhook and exporter/retuner for vLLM on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
# Numeric UID/GID so that Kubernetes can verify runAsNonRoot without reading /etc/passwd; the chart
# runs with the same IDs (podSecurityContext.runAsUser/runAsGroup 10001).
RUN groupadd --system --gid 10001 kv-planner \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin kv-planner
COPY --from=build /opt/kv-planner /opt/kv-planner
ENV PATH=/opt/kv-planner/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HF_HOME=/tmp/huggingface \
    MPLCONFIGDIR=/tmp/matplotlib
USER 10001:10001
# webhook HTTPS, webhook metrics, exporter
EXPOSE 8443 9090 9400
ENTRYPOINT ["python", "-m", "admission"]
CMD ["--help"]
