# gpuq's image: `docker compose up -d` on a GPU host with the NVIDIA container toolkit
# (docs/operators/container.md). Two stages: the first installs gpuq and its
# dependencies into a virtualenv at /opt/gpuq, the second is the base image and that
# virtualenv alone, so no build tools, wheels or pip caches end up in the image.
#
# Build arguments:
#   BASE   the base image; any with python3 (3.11+) and its venv module
#          (default the official python:3.11-slim)
#   EXTRA  `gpu` (tensorflow[and-cuda], the default) or `cpu` (tensorflow-cpu: laptops, CI)
#   PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX, PIP_TRUSTED_HOST
#          a package mirror for builds without PyPI; pip reads them while the image builds
#          and none is kept in it. E.g. wheels from `pip download` served on this host:
#          docker build --network host --build-arg PIP_NO_INDEX=1 \
#              --build-arg PIP_FIND_LINKS=http://127.0.0.1:8080/ .
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ARG EXTRA=gpu
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
ARG PIP_TRUSTED_HOST
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/gpuq
WORKDIR /src
# The dependencies first, read from pyproject.toml, so that a change to gpuq's code
# rebuilds only the last layer, not TensorFlow's.
COPY pyproject.toml README.md ./
RUN python3 -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
print("\n".join(p["dependencies"] + p["optional-dependencies"][sys.argv[1]] \
+ p["optional-dependencies"]["postgres"]))' "${EXTRA}" > requirements.txt \
 && /opt/gpuq/bin/pip install --requirement requirements.txt
COPY gpuq ./gpuq
COPY service ./service
COPY worker ./worker
COPY migrations ./migrations
RUN /opt/gpuq/bin/pip install --no-deps . && /opt/gpuq/bin/pip check

FROM ${BASE}
COPY --from=build /opt/gpuq /opt/gpuq
# All state (database, run directories, trained models, the login socket) is in the
# volume: the container can be replaced without losing a job.
ENV PATH=/opt/gpuq/bin:$PATH \
    GPUQ_HOME=/var/lib/gpuq \
    GPUQ_HOST=0.0.0.0 \
    GPUQ_PORT=8000 \
    PYTHONUNBUFFERED=1
VOLUME /var/lib/gpuq
EXPOSE 8000
# Root, on purpose: with GPUQ_RUN_AS=owner, gpuq drops every job to its owner's Unix
# account (uid, groups, umask 077) before anything of the job runs, and makes its run
# directory theirs alone; only root can do that. Mount the host's /etc/passwd and
# /etc/group read-only for the accounts (docker-compose.yml shows how). Under the default
# GPUQ_RUN_AS=service jobs would run as root, so gpuq refuses `command` jobs then unless
# GPUQ_ALLOW_ROOT_JOBS=1 (builtin training jobs run gpuq's own trainer).
USER root
# `gpuq serve` brings the database's schema up to date (the migrations) before it serves.
CMD ["gpuq", "serve"]
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["python3", "-P", "-m", "service.healthcheck"]
