# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Stamps: what serving needs (make run), and the whole development set (test, lint...).
INSTALLED_RUNTIME := $(VENV)/.installed-runtime
INSTALLED := $(VENV)/.installed
VENV_PIP := $(BIN)/pip
# pip for the virtualenv: its own, else this Python's pip installing into it (pip 22.3+,
# --python), which spares the first `make run` making a pip of the virtualenv's own.
PIP = $$(if $(BIN)/python -m pip --version >/dev/null 2>&1; then echo $(BIN)/python -m pip; \
  elif $(PYTHON) -m pip --python $(BIN)/python --version >/dev/null 2>&1; then \
    echo $(PYTHON) -m pip --python $(BIN)/python; \
  else $(BIN)/python -m ensurepip --default-pip >/dev/null && echo $(BIN)/python -m pip; fi)
PIP_INSTALL = $(PIP) install --quiet --disable-pip-version-check --require-hashes
OIDC_PROVIDER := tests/system/oidc_provider
OIDC_INSTALLED := $(OIDC_PROVIDER)/node_modules/.package-lock.json
# The markers of the tests that start real servers outside tests/system/ (the README's and
# walk-through's runs, the stores' suites on Redis and PostgreSQL), or Python processes.
SERVER_MARKERS := gunicorn or redis or postgres or nginx or oidc or disk or browser or processes
# The suite starts hundreds of Python processes (gunicorn, flask, scripts): with bytecode
# written, each imports the service compiled, not from source, and pytest keeps its
# rewritten test modules.
unexport PYTHONDONTWRITEBYTECODE

# The uv that pyproject.toml's dev extra pins, read from there rather than repeated here.
UV_REQUIREMENT = $$($(BIN)/python -c 'import tomllib; \
  dev = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"]; \
  print(next(r for r in dev if r.startswith("uv==")))')
# Pin every platform and Python >= 3.11 in one file, with every distribution's hash.
COMPILE = $(BIN)/uv pip compile pyproject.toml --universal --generate-hashes \
  --custom-compile-command "make requirements" --quiet

.PHONY: help venv run image print-image test test-fast test-deploy lint typecheck format bench \
	bench-short bench-gateway bench-scale \
	soak requirements clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

# Each failure is one line (make adds its own `make: *** ... Error 1` and exits 2). A
# virtualenv whose Python cannot run, or is too old, is left alone: the line says how to fix.
venv:  ## a Python 3.11+ virtualenv in .venv (one that cannot run is reported, never removed)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  if version=$$($(PYTHON) --version 2>&1 </dev/null); then \
	    echo "make: Python 3.11 or newer is needed, but $(PYTHON) is $$version;" \
	      "try: make PYTHON=python3.11 ..." >&2; \
	  else \
	    echo "make: Python 3.11 or newer is needed, but $(PYTHON) was not found;" \
	      "try: make PYTHON=python3.11 ..." >&2; \
	  fi; exit 1; }
	@if [ -e $(BIN)/python ] || [ -L $(BIN)/python ]; then \
	  $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	    if version=$$($(BIN)/python --version 2>/dev/null </dev/null); then \
	      problem="has $$version, and 3.11 or newer is needed"; \
	    else problem="has a Python that cannot run ($(BIN)/python)"; fi; \
	    echo "make: the virtualenv $(VENV) $$problem;" \
	      "remove it (rm -rf $(VENV)) and run make again" >&2; exit 1; }; \
	else $(PYTHON) -m venv --without-pip $(VENV); fi

# Serving: no byte-compiling of every module at install (the ones gunicorn imports are
# compiled as it imports them).
$(INSTALLED_RUNTIME): requirements.txt | venv
	@echo "pip install --require-hashes -r requirements.txt  # into $(VENV)"
	@$(PIP_INSTALL) --no-compile -r requirements.txt
	touch $@

# The development set holds the runtime set at the very same versions; the tools (and
# make requirements) use the virtualenv's own pip.
$(INSTALLED): requirements.txt requirements-dev.txt | $(VENV_PIP)
	@echo "pip install --require-hashes -r requirements-dev.txt  # into $(VENV)"
	@$(PIP_INSTALL) -r requirements-dev.txt
	touch $@ $(INSTALLED_RUNTIME)

$(VENV_PIP): | venv
	$(BIN)/python -m ensurepip --default-pip >/dev/null

# The OpenID Connect provider of the end-to-end tests (skipped, or failed in CI, without npm).
$(OIDC_INSTALLED): $(OIDC_PROVIDER)/package-lock.json
	if command -v npm >/dev/null; then npm ci --prefix $(OIDC_PROVIDER) --no-audit --no-fund --loglevel=error; fi

# A plain command, so make starts gunicorn itself, with no shell between them: signals
# reach it directly. A start-up error is its one line (then make's own, exit status 2).
run: $(INSTALLED_RUNTIME)  ## serve with gunicorn on HOST:PORT (default 127.0.0.1:8080; HOST=0.0.0.0 BEHIND_PROXY=true USERS_FILE=... in a container)
	@$(BIN)/gunicorn -c gunicorn.conf.py wsgi:app

# The container image (Containerfile, docs/deployment.md), named after the project's version,
# built with podman, or docker when there is no podman. podman keeps the HEALTHCHECK only in
# docker's image format.
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
IMAGE ?= token-service:$(VERSION)
CONTAINER_ENGINE ?= $(if $(shell command -v podman),podman,docker)
image:  ## build the container image token-service:<version> (podman, else docker)
	$(CONTAINER_ENGINE) build $(if $(filter podman,$(notdir $(CONTAINER_ENGINE))),--format docker) \
	  -f Containerfile -t $(IMAGE) .

print-image:  ## the name and tag make image gives the image
	@echo $(IMAGE)

# The suite on pytest-xdist's workers, half as many again as cores: each worker starts its
# own servers, on ports and in folders of its own, and many tests wait on them, so a core
# left idle by a waiting worker takes another's tests (docs/development.md). WORKERS=1
# runs it in one process.
WORKERS ?= $(shell cores=$$(nproc 2>/dev/null || echo 1); echo $$((cores + cores / 2)))
PARALLEL = $(if $(filter 1,$(WORKERS)),-p no:xdist,-n $(WORKERS) --dist worksteal)

test: $(INSTALLED) $(OIDC_INSTALLED)  ## the whole suite, real servers included, on every store
	$(BIN)/python -m pytest $(PARALLEL)

test-fast: $(INSTALLED)  ## the suite without the tests that start servers or Python processes
	$(BIN)/python -m pytest $(PARALLEL) -m "not system and not ($(SERVER_MARKERS))"

# Outside make test: they build a wheel and, with podman, the image (docs/deployment.md).
test-deploy: $(INSTALLED)  ## the installed package, the container image, the Kubernetes manifests
	$(BIN)/python -m pytest -p no:cacheprovider tests/deploy

lint: $(INSTALLED)  ## ruff (lint, format), mypy (strict on app/), the layers (lint-imports)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

typecheck: $(INSTALLED)  ## mypy: strict type check of app/
	$(BIN)/mypy

# Benchmarks (docs/performance.md; need wrk, and nginx, redis-server and PostgreSQL for the
# groups that use them); the report goes to bench/results/. BENCH_ARGS picks the groups
# (--only main,matrix,gateway,rules,scale), stores, rounds...: .venv/bin/python -m bench.run --help
BENCH_ARGS ?=
bench: $(INSTALLED)  ## the service paired against a floor, peers, store floors, nginx: targets
	$(BIN)/python -m bench.run $(BENCH_ARGS)

bench-short: $(INSTALLED)  ## every pair once for 1 s; fails on an unexpected status (CI)
	$(BIN)/python -m bench.run --short

bench-gateway: $(INSTALLED)  ## the gateway group: the protected path through nginx and Caddy, checked and straight
	$(BIN)/python -m bench.run --only gateway $(BENCH_ARGS)

bench-scale: $(INSTALLED)  ## the scale group: 1,000,000 stored tokens against none; workers' RSS
	$(BIN)/python -m bench.run --only scale $(BENCH_ARGS)

# The soak (docs/soak.md; needs nginx and redis-server): SOAK_SECONDS of load with faults on
# each store in SOAK_STORES; the report and its chart go to SOAK_RESULTS/soak-<store>.*, a
# folder git ignores: copy a run to bench/results/ and commit it to publish it.
SOAK_SECONDS ?= 600
SOAK_STORES ?= sqlite redis
SOAK_RESULTS ?= bench/results/runs
soak: $(INSTALLED)  ## load with faults through nginx, SOAK_SECONDS (600) on SQLite, then on Redis
	$(BIN)/python -m tests.system.soak --seconds $(SOAK_SECONDS) --results $(SOAK_RESULTS) \
	  $(foreach store,$(SOAK_STORES),--store $(store))

format: $(INSTALLED)  ## ruff: fix what it can, format
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The dev set is resolved first, so the runtime pins are the very versions the tests run on.
# Pins already in the files are kept unless ARGS asks for newer ones (docs/development.md);
# a file left with merge-conflict markers starts again from its committed version.
requirements: | $(VENV_PIP)  ## pin and hash requirements*.txt from pyproject.toml (ARGS=--upgrade: newest)
	@uv="$(UV_REQUIREMENT)" && echo "pip install $$uv" \
	  && $(BIN)/python -m pip install --quiet --disable-pip-version-check "$$uv"
	@for file in requirements-dev.txt requirements.txt; do \
	  if grep -qE '^(<<<<<<<|=======|>>>>>>>)' $$file 2>/dev/null; then \
	    echo "$$file has merge-conflict markers: starting from its committed version"; \
	    git show HEAD:$$file >$$file 2>/dev/null || rm -f $$file; \
	  fi; \
	done
	$(COMPILE) --extra dev --output-file requirements-dev.txt $(ARGS)
	$(COMPILE) --constraint requirements-dev.txt --output-file requirements.txt

clean:  ## remove the virtualenv, node modules and caches
	rm -rf $(VENV) $(OIDC_PROVIDER)/node_modules .pytest_cache .ruff_cache
