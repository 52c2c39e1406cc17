# Each target installs the project into .venv when it is missing (or pyproject.toml changed).
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
PY := $(VENV)/bin/python

.PHONY: serve test test-fast bench image lock install clean chromium

# Debian's packages, installed when missing (as root; otherwise the command to run is printed).
APT_INSTALL = [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq
# The browser the report tests drive through Playwright (never one Playwright downloads).
chromium:
	@command -v chromium >/dev/null || $(APT_INSTALL) chromium >/dev/null || \
	  { echo "the browser tests need Debian's chromium: apt-get install chromium" >&2; exit 1; }

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/optu serve --host 127.0.0.1 --port 8000

# Two test processes (each test's tier and isolation as when run alone: tests/conftest.py); the
# slowest tests listed at the end.
test: $(STAMP) | chromium
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=25

# The unit tier only: no server, no subprocess (tests/conftest.py holds each tier to its word).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m unit -n 2

bench: $(STAMP)
	$(PY) -m bench.run
	$(PY) -m bench.speed
	$(PY) -m bench.time_limits
	$(PY) -m bench.never_worse
	$(PY) -m bench.lower_bound
	$(PY) -m bench.attention
	$(PY) -m bench.mutation
	$(PY) -m bench.cpu_speed
	$(PY) -m bench.calibration
	$(PY) -m bench.assumptions
	$(PY) -m bench.profile_table
	$(PY) -m bench.load
	$(PY) -m bench.queue_load
	$(PY) -m bench.image
	$(PY) -m bench.torch_zoo
	$(PY) -m bench.hf_models
	$(PY) -m bench.decode

# The service image (both roles: `optu serve`, `optu worker`); on host-network-only machines the
# build itself must use the host network too.
image:
	docker build --network host -t optu-eqsat:0.1.0 .

# The image's dependencies, exact and hashed, from pyproject.toml's (the dev extras are not in it),
# for any Python 3.11 (markers kept: the image's interpreter is not this machine's).
lock: $(STAMP)
	$(VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes --no-header \
		-o requirements.lock

clean:
	rm -rf $(VENV) build *.egg-info
