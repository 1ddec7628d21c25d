# The image every agentfleet service of docker-compose.yml runs. Build your own on top of it
# to add your task modules:  FROM agentfleet:latest  +  RUN pip install --user ./myapp
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/agentfleet
COPY pyproject.toml README.md ./
COPY agentfleet ./agentfleet
RUN pip install . \
    && useradd --create-home --uid 10001 agentfleet

USER agentfleet
CMD ["agentfleet", "--help"]
