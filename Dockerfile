# gpuq for a GPU host with the NVIDIA container toolkit: `docker compose up -d`.
FROM python:3.11-slim

ARG EXTRA=gpu
WORKDIR /opt/gpuq
COPY pyproject.toml README.md ./
COPY gpuq ./gpuq
# postgres: psycopg, for GPUQ_DATABASE_URL=postgresql+psycopg://... (docker-compose.yml)
RUN pip install --no-cache-dir ".[${EXTRA},postgres]"

ENV GPUQ_HOME=/var/lib/gpuq \
    GPUQ_HOST=0.0.0.0 \
    GPUQ_PORT=8000
VOLUME /var/lib/gpuq
EXPOSE 8000
CMD ["gpuq", "serve"]
