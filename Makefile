# Two commands matter: `make demo` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean system-deps screenshots

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/agentfleet demo

lint: $(STAMP)
	$(BIN)/ruff check agentfleet tests bench examples
	$(BIN)/mypy
	$(BIN)/lint-imports

# The console's browser test drives Debian's chromium; the alert rules are checked with promtool
# from Debian's prometheus package. As root (CI), install whichever is missing.
system-deps:
	@if [ "$$(id -u)" = 0 ]; then \
	  missing=""; \
	  [ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	  command -v promtool >/dev/null || missing="$$missing prometheus"; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  fi; \
	fi

test: lint system-deps
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/pytest -q

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not slow"

# kombu's and Celery's own Redis integration suites, run with kombu's stock transport and with
# agentfleet's and compared test by test (docs/guarantees.md). Not part of `make test`: it takes
# about 21 minutes. Its venv holds the same versions as .venv (constrained by its freeze).
UPSTREAM_VENV := .venv-upstream
UPSTREAM_STAMP := $(UPSTREAM_VENV)/.installed

$(UPSTREAM_STAMP): $(STAMP) tests/upstream/requirements.txt
	test -x $(UPSTREAM_VENV)/bin/python || $(PYTHON) -m venv $(UPSTREAM_VENV)
	$(BIN)/python -m pip freeze --exclude-editable > $(UPSTREAM_VENV)/constraints.txt
	$(UPSTREAM_VENV)/bin/python -m pip install --quiet -e . -r tests/upstream/requirements.txt -c $(UPSTREAM_VENV)/constraints.txt
	touch $(UPSTREAM_STAMP)

.PHONY: test-upstream
test-upstream: $(UPSTREAM_STAMP)
	PYTHONPATH=tests $(UPSTREAM_VENV)/bin/python -m upstream.run_upstream

# The console's screenshots in docs/img, taken by its browser test.
screenshots: $(STAMP) system-deps
	AGENTFLEET_SCREENSHOTS=docs/img $(BIN)/pytest -q tests/test_console_browser.py

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
