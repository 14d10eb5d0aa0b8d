# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
OIDC_PROVIDER := tests/oidc_provider
OIDC_INSTALLED := $(OIDC_PROVIDER)/node_modules/.package-lock.json
SERVER_MARKERS := gunicorn or redis or nginx or oidc

# The uv that pyproject.toml's dev extra pins, read from there rather than repeated here.
UV_REQUIREMENT = $$($(BIN)/python -c 'import tomllib; \
  dev = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"]; \
  print(next(r for r in dev if r.startswith("uv==")))')
# Pin every platform and Python >= 3.11 in one file, with every distribution's hash.
COMPILE = $(BIN)/uv pip compile pyproject.toml --universal --generate-hashes \
  --custom-compile-command "make requirements" --quiet

.PHONY: help venv run test test-fast lint typecheck format bench bench-short bench-scale \
	requirements clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

venv:  ## a Python 3.11+ virtualenv in .venv (one an older Python made is replaced)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "make: Python 3.11 or newer is needed, but $(PYTHON) is" \
	    "$$($(PYTHON) --version 2>&1 || echo missing); try: make PYTHON=python3.11 ..." >&2; \
	  exit 1; }
	@$(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	  || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }

$(INSTALLED): requirements.txt requirements-dev.txt | venv
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes \
	  -r requirements-dev.txt
	touch $@

# The OpenID Connect provider of the end-to-end tests (skipped, or failed in CI, without npm).
$(OIDC_INSTALLED): $(OIDC_PROVIDER)/package-lock.json
	if command -v npm >/dev/null; then npm ci --prefix $(OIDC_PROVIDER) --no-audit --no-fund --loglevel=error; fi

run: $(INSTALLED)  ## serve with gunicorn on HOST:PORT (default 127.0.0.1:8080; HOST=0.0.0.0 in a container)
	$(BIN)/gunicorn -c gunicorn.conf.py wsgi:app

# The suite on every core (pytest-xdist): each worker starts its own servers, on ports
# and in folders of its own. WORKERS=1 runs it in one process; WORKERS=4 oversubscribes a
# machine whose tests mostly wait on servers.
WORKERS ?= auto
PARALLEL = $(if $(filter 1,$(WORKERS)),-p no:xdist,-n $(WORKERS) --dist worksteal)

test: $(INSTALLED) $(OIDC_INSTALLED)  ## the whole suite, real servers included, on every store
	$(BIN)/python -m pytest $(PARALLEL)

test-fast: $(INSTALLED)  ## the suite without the tests that start real servers
	$(BIN)/python -m pytest $(PARALLEL) -m "not ($(SERVER_MARKERS))"

lint: $(INSTALLED)  ## ruff (lint and format check) and mypy (strict on app/)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

typecheck: $(INSTALLED)  ## mypy: strict type check of app/
	$(BIN)/mypy

# Benchmarks (need wrk: apt-get install wrk); results go to bench/results/.
bench: $(INSTALLED)  ## the service beside a floor and two peers: 3 rounds, targets
	$(BIN)/python -m bench.run

bench-short: $(INSTALLED)  ## every scenario once for 1 s; fails on an unexpected status (CI)
	$(BIN)/python -m bench.run --short

bench-scale: $(INSTALLED)  ## /token on 1,000,000 stored tokens; workers' RSS over 100,000 logins
	$(BIN)/python -m bench.run --scale

format: $(INSTALLED)  ## ruff: fix what it can, format
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The dev set is resolved first, so the runtime pins are the very versions the tests run on.
# Pins already in the files are kept unless ARGS asks for newer ones (README, Dependencies);
# a file left with merge-conflict markers starts again from its committed version.
requirements: | venv  ## pin and hash requirements*.txt from pyproject.toml (ARGS=--upgrade: newest)
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
