# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
OIDC_PROVIDER := tests/oidc_provider
OIDC_INSTALLED := $(OIDC_PROVIDER)/node_modules/.package-lock.json
SERVER_MARKERS := gunicorn or redis or nginx or oidc

.PHONY: run test test-fast lint format bench bench-short bench-scale clean

$(INSTALLED): requirements.txt requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

# The OpenID Connect provider of the end-to-end tests (skipped, or failed in CI, without npm).
$(OIDC_INSTALLED): $(OIDC_PROVIDER)/package-lock.json
	if command -v npm >/dev/null; then npm ci --prefix $(OIDC_PROVIDER) --no-audit --no-fund --loglevel=error; fi

run: $(INSTALLED)  ## serve on $$PORT (default 8080) with gunicorn
	$(BIN)/gunicorn -c gunicorn.conf.py wsgi:app

# The core service's tests, which `make test` runs a second time with the refresh tokens
# in Redis (--store=redis: a redis-server that the test session starts and stops).
CORE_TESTS := tests/test_login.py tests/test_refresh.py tests/test_revoke.py \
	tests/test_protected.py tests/test_requires_roles.py tests/test_tokens.py \
	tests/test_errors.py tests/test_config.py tests/test_gunicorn.py tests/test_readme.py

test: $(INSTALLED) $(OIDC_INSTALLED)  ## the whole suite, real servers included, then the core on Redis
	$(BIN)/python -m pytest
	$(BIN)/python -m pytest --store=redis -m "not redis" $(CORE_TESTS)

test-fast: $(INSTALLED)  ## everything but the tests that start real servers
	$(BIN)/python -m pytest -m "not ($(SERVER_MARKERS))"

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Benchmarks (need wrk: apt-get install wrk); results go to bench/results/.
bench: $(INSTALLED)  ## the service beside a floor and two peers: 3 rounds, targets
	$(BIN)/python -m bench.run

bench-short: $(INSTALLED)  ## every scenario once for 1 s; fails on an unexpected status (CI)
	$(BIN)/python -m bench.run --short

bench-scale: $(INSTALLED)  ## /token on 1,000,000 stored tokens; workers' RSS over 100,000 logins
	$(BIN)/python -m bench.run --scale

format: $(INSTALLED)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) $(OIDC_PROVIDER)/node_modules .pytest_cache .ruff_cache
