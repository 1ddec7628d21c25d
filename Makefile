# Two commands matter: `make demo` and `make test`. Both build .venv on first use, from uv.lock.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# uv installs the lock; pip only brings uv itself into the venv (uv keeps it there on sync).
UV_VERSION := 0.13.9
UV := $(BIN)/uv
UV_STAMP := $(VENV)/.uv-$(UV_VERSION)
# uv uses the venv's interpreter ($(PYTHON)'s) and never fetches one of its own.
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: demo test test-fast test-floors lint lock upgrade bench bench-deps clean system-deps screenshots

$(UV_STAMP):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	touch $(UV_STAMP)

$(STAMP): pyproject.toml uv.lock $(UV_STAMP)
	$(UV) sync --locked --extra dev
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/agentfleet demo

# deptry: every module imported is a declared requirement. The tests, benchmarks and examples
# may import the dev extra too (and deptry skips tests/ unless its exclusions are replaced).
lint: $(STAMP)
	$(BIN)/ruff check agentfleet tests bench examples .ci
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/deptry agentfleet
	$(BIN)/deptry tests bench examples .ci --exclude '\.venv' --ignore DEP002,DEP004

# The console's browser test drives Debian's chromium; the alert rules are checked with promtool
# from Debian's prometheus package; the sandbox tests run bubblewrap. As root (CI), install
# whichever is missing.
system-deps:
	@if [ "$$(id -u)" = 0 ]; then \
	  missing=""; \
	  [ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	  command -v promtool >/dev/null || missing="$$missing prometheus"; \
	  command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	  command -v curl >/dev/null || missing="$$missing curl"; \
	  [ -x /usr/bin/python3 ] || missing="$$missing python3"; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  fi; \
	fi

# The suite mostly waits (on worker processes, Redis, timeouts), so it runs in more pytest
# processes than this 2-core machine has cores (pytest-xdist). Each file goes whole to one
# process (its module fixtures start once), the longest first, but the tests of the few long
# files with no module fixture go one by one (tests/file_order.py, tests/conftest.py).
# TEST_WORKERS=0 runs it in this one process; PYTEST_ARGS adds options (--durations=40, -x).
TEST_WORKERS ?= 4
PYTEST_ARGS ?=

test: lint system-deps
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not slow"

# The lowest versions pyproject.toml allows (uv's lowest-direct resolution) in a venv of their
# own: each must be installed at its declared floor, run the demo's fan-out and pass the
# transport and fan-out suites. The test tools come at their locked versions.
FLOORS := .venv-floors
FLOOR_TESTS := tests/test_redis_transport.py tests/test_redis_intake.py tests/test_batched_acks.py \
	tests/test_redis_ready.py tests/test_local_cluster.py tests/test_fleet_integration.py \
	tests/test_agents_integration.py tests/test_gevent_intake.py tests/test_gevent_worker.py \
	tests/test_tracing.py
# Extras installed at their floors too, and checked with the requirements.
FLOOR_EXTRAS := otel
TEST_TOOLS := ^(pytest|pytest-timeout|iniconfig|pluggy)==

test-floors: $(UV_STAMP)
	rm -rf $(FLOORS)
	$(UV) venv --quiet --python $(BIN)/python $(FLOORS)
	$(UV) pip install --quiet --python $(FLOORS)/bin/python --resolution lowest-direct -e ".[$(FLOOR_EXTRAS)]"
	$(UV) pip freeze --quiet --python $(FLOORS)/bin/python --exclude-editable > $(FLOORS)/floors.txt
	$(UV) export --quiet --frozen --extra dev --no-emit-project --no-hashes --no-header --no-annotate \
	  | grep -E '$(TEST_TOOLS)' > $(FLOORS)/test-tools.txt
	$(UV) pip install --quiet --python $(FLOORS)/bin/python -c $(FLOORS)/floors.txt -r $(FLOORS)/test-tools.txt
	$(FLOORS)/bin/python .ci/check_floors.py $(FLOOR_EXTRAS)
	env -u ANTHROPIC_API_KEY -u AGENTFLEET_BROKER_URL $(FLOORS)/bin/agentfleet demo --workers 1 --concurrency 4
	$(FLOORS)/bin/python -m pytest -q -p no:cacheprovider $(FLOOR_TESTS)

# Re-resolve uv.lock after an edit of pyproject.toml, moving nothing else.
lock: $(UV_STAMP)
	$(UV) lock

# The suites a refreshed lock must pass before it is committed: ours, then kombu's and Celery's own.
UPGRADE_SUITES := test test-upstream

# The newest releases pyproject.toml allows, installed and tested (docs/dependencies.md).
upgrade: $(UV_STAMP)
	$(UV) lock --upgrade
	$(UV) sync --locked --extra dev
	touch $(STAMP)
	$(MAKE) $(UPGRADE_SUITES)

# kombu's and Celery's own Redis integration suites, run with kombu's stock transport and with
# agentfleet's and compared test by test (docs/guarantees.md). Not part of `make test`: it takes
# about 21 minutes. Its venv holds the same versions as .venv (constrained by its freeze).
UPSTREAM_VENV := .venv-upstream
UPSTREAM_STAMP := $(UPSTREAM_VENV)/.installed

$(UPSTREAM_STAMP): $(STAMP) $(UV_STAMP) tests/upstream/requirements.txt
	test -x $(UPSTREAM_VENV)/bin/python || $(PYTHON) -m venv $(UPSTREAM_VENV)
	$(UV) pip freeze --python $(BIN)/python --exclude-editable > $(UPSTREAM_VENV)/constraints.txt
	$(UPSTREAM_VENV)/bin/python -m pip install --quiet -e . -r tests/upstream/requirements.txt -c $(UPSTREAM_VENV)/constraints.txt
	touch $(UPSTREAM_STAMP)

.PHONY: test-upstream
test-upstream: $(UPSTREAM_STAMP)
	PYTHONPATH=tests $(UPSTREAM_VENV)/bin/python -m upstream.run_upstream

# The console's screenshots in docs/img, taken by its browser test.
screenshots: $(STAMP) system-deps
	AGENTFLEET_SCREENSHOTS=docs/img $(BIN)/pytest -q tests/test_console_browser.py

# bench/instructions.py counts Redis's instructions under valgrind's callgrind.
bench-deps:
	@if [ "$$(id -u)" = 0 ] && ! command -v valgrind >/dev/null; then \
	  echo "installing Debian packages: valgrind"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind; \
	fi

bench: $(STAMP) bench-deps
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) $(FLOORS) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
