# From a fresh clone: `make run` starts the service, `make test` runs lint and every test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# `cpu` for laptops and CI; a CUDA host uses `make run EXTRA=gpu`.
EXTRA ?= cpu

.PHONY: run test check lint format docs bench clean chromium slurm postgresql deploy-tools gpu-check \
	gpu-wheels

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "gpuq needs Python 3.11 or newer (PYTHON=$(PYTHON))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==26.3

$(VENV)/.installed-$(EXTRA): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[$(EXTRA)]'
	rm -f $(VENV)/.installed-*
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed-$(EXTRA)
	$(BIN)/pip install --quiet -e '.[$(EXTRA),dev,postgres]'
	touch $@

run: $(VENV)/.installed-$(EXTRA)
	$(BIN)/gpuq serve

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q -p no:cacheprovider tests/test_code_shape.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The documentation site (mkdocs.yml, docs/), rebuilt as its pages change; `make lint` builds
# it with --strict, so a broken link or a page missing from the navigation fails `make test`.
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8002

format: $(VENV)/.installed-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The dashboard's test drives a real headless Chromium (Debian's package).
chromium:
	@scripts/ensure-command chromium chromium "the dashboard's test"

# The Slurm executor's tests run a real one-node cluster (scripts/slurm-cluster) on Debian's
# slurm-wlm and munge, with a loopback shim that gcc compiles (with libc6-dev's headers).
slurm:
	@export PATH="$$PATH:/usr/sbin:/sbin"; \
	scripts/ensure-command slurmctld slurm-wlm "the Slurm executor's tests" && \
	scripts/ensure-command munged munge "the Slurm executor's tests" && \
	scripts/ensure-command gcc gcc "the Slurm test cluster's loopback shim" && \
	if [ ! -e /usr/include/netinet/in.h ]; then \
		scripts/ensure-command /usr/include/netinet/in.h libc6-dev "the loopback shim"; \
	fi

# The database tests run on PostgreSQL too, in a throwaway cluster (tests/postgres.py) made
# with Debian's server programs, which live off PATH in /usr/lib/postgresql/VERSION/bin.
postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		scripts/ensure-command initdb postgresql "the PostgreSQL tests"

# The deployment tests (tests/deploy/) build and run the container image on a Docker daemon
# of their own (docker.io) with a base image made by debootstrap, check docker-compose.yml
# with compose itself (Debian packages compose v1, `docker-compose`) and deploy/'s systemd
# units with systemd-analyze. capsh: the warm workers' test drops a capability as Docker does.
deploy-tools:
	@export PATH="$$PATH:/usr/sbin:/sbin"; \
	scripts/ensure-command dockerd docker.io "the container image's test" && \
	scripts/ensure-command debootstrap debootstrap "the container image's base" && \
	scripts/ensure-command docker-compose docker-compose "the compose file's check" && \
	scripts/ensure-command systemd-analyze systemd "the systemd unit's check" && \
	scripts/ensure-command capsh libcap2-bin "the standby runners' test"

# The suite runs in two pytest-xdist workers on 2 cores (about 16 minutes, the cores 1.5x
# busy). Three took 14:19-14:57, but their load once lost a job's runner in
# test_durability's kill -9 mid-burst (a race of the restart, in the note of 2026-11-29):
# two until it is found. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2

test: lint chromium slurm postgresql deploy-tools
	$(BIN)/pytest --numprocesses=$(TEST_WORKERS) --durations=40

# The inner loop (under 2 minutes on 2 cores): `make lint`, then the tests that train
# nothing and start no cluster, container or PostgreSQL (`make test` runs those too: the
# `e2e` and `slow` tests, tests/e2e, slurm, deploy and docs, and every test's PostgreSQL run).
# Its tests mostly wait (for a subprocess, a socket, a poll), so four workers share two
# cores well: 81 s against 110 s with two.
CHECK_SKIPS := --ignore=tests/e2e --ignore=tests/slurm --ignore=tests/deploy --ignore=tests/docs
CHECK_WORKERS ?= 4
check: lint
	$(BIN)/pytest --numprocesses=$(CHECK_WORKERS) -q -m "not e2e and not slow" -k "not postgres" \
		$(CHECK_SKIPS)

# The quick versions (a few minutes on 2 cores); each prints its table. BENCHMARKS.md has
# the full runs and the commands for them.
bench: $(VENV)/.installed-dev
	@scripts/ensure-command wrk wrk "the API benchmark"
	@scripts/ensure-command tsp task-spooler "the task-spooler comparison"
	$(BIN)/python -m bench.api --seconds 3
	$(BIN)/python -m bench.vs_tsp --runs 10 --jobs 200
	$(BIN)/python -m bench.accept_path --seconds 3 --rounds 2
	$(BIN)/python -m bench.write_turns --writes 200 --rounds 2
	$(BIN)/python -m bench.training --samples 20000 --epochs 4 --repeats 2
	$(BIN)/python -m bench.checkpoint_cost --epochs 8
	$(BIN)/python -m bench.scheduling --jobs 2000 --queued 10000
	$(BIN)/python -m bench.scale --sizes 1000,100000 --seconds 2
	$(BIN)/python -m bench.usage --sizes 1000,100000
	$(BIN)/python -m bench.fences --fences 50

clean:
	rm -rf $(VENV) .gpuq .pytest_cache .ruff_cache test-artifacts site

# The GPU acceptance run (scripts/gpu-check) on any Linux box with an NVIDIA GPU and
# PyTorch: no virtualenv and no network needed there. gpuq's service dependencies come
# from .whl/ when present, made beforehand on a machine with network by `make gpu-wheels`.
gpu-check:
	$(PYTHON) scripts/gpu-check

gpu-wheels:
	$(PYTHON) scripts/gpu-wheels
