# The image every agentfleet service of docker-compose.yml runs (`docker compose --profile build
# build` tags it agentfleet:0.1.0). Build your own on top of it to add your task modules:
#   FROM agentfleet:0.1.0
#   USER root
#   RUN pip install ./myapp
#   USER 10001:10001
# and run it with AGENTFLEET_IMAGE=myapp-agents:1.0 in .env.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The uv release that reads uv.lock (the Makefile's UV_VERSION).
ARG UV_VERSION=0.13.9

WORKDIR /srv/agentfleet
COPY pyproject.toml uv.lock README.md ./
COPY agentfleet ./agentfleet
# The versions uv.lock holds, each checked against its hashes; then agentfleet itself, whose
# requirements those already are. uv only exports the lock and is not left in the image.
RUN pip install "uv==${UV_VERSION}" \
    && uv export --quiet --frozen --no-emit-project --format requirements-txt --output-file /tmp/requirements.txt \
    && pip uninstall --yes uv \
    && pip install --require-hashes --requirement /tmp/requirements.txt \
    && pip install --no-deps . \
    && rm /tmp/requirements.txt \
    && groupadd --gid 10001 agentfleet \
    && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin agentfleet

# By number, so an orchestrator can verify it is not root (Kubernetes' runAsNonRoot).
USER 10001:10001
CMD ["agentfleet", "--help"]
