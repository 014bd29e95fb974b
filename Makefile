# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# mypyc compiles these (setup.py); an edit to one must rebuild, or the stale compiled module would run
COMPILED := $(shell sed -n 's/^ *"\(nsqd_py\/.*\.py\)",$$/\1/p' setup.py)
# the tests also run on pure Python (NSQD_PY_PURE=1 imports the .py sources): this subset
PURE_TESTS := tests/unit tests/protocol tests/http
# and with TCP clients served by I/O worker processes (NSQD_PY_IO_WORKERS, issue 37): the tests of this subset that
# start nsqd as a process (in-process tests serve TCP in the test's own process, in either mode). HTTP is served by
# the broker process in both modes, the same code, so tests/http runs once.
IO_WORKER_TESTS := tests/protocol tests/clients tests/persistence tests/security
# ccache, when installed (`make test` installs Debian's), so the wheel `make dist` compiles reuses the objects of the
# install's compile: the same generated C with the same flags (NOHASHDIR: the two builds run in different directories;
# and both build in the venv, with its mypyc, not in an isolated build environment of their own)
WITH_CCACHE := if command -v ccache >/dev/null; then export CC="ccache $${CC:-gcc}" CCACHE_NOHASHDIR=1; fi;
# most tests wait (on processes, timeouts, heartbeats), so 4 workers overlap them even on 2 cores; a test file
# stays on one worker, so its module fixtures (a Spark cluster, a pair of nsqds) start once
PARALLEL ?= -n 4 --dist loadfile

.PHONY: run test install lint bench bench-deps browser-deps ccache-deps faketime-deps strace-deps fuse-deps clean dist

run: install
	mkdir -p data
	$(BIN)/nsqd --config configs/nsqd.toml

test: ccache-deps install browser-deps faketime-deps strace-deps fuse-deps
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -q $(PARALLEL) --durations=25
	@# the two short runs side by side (2 min 41 s instead of 3 min 15 s; the pure one's output follows the other's)
	NSQD_PY_PURE=1 $(BIN)/pytest -q -n 2 --dist loadfile $(PURE_TESTS) > $(VENV)/pure-tests.log 2>&1 & pure=$$!; \
	NSQD_PY_IO_WORKERS=2 $(BIN)/pytest -q $(PARALLEL) -m process $(IO_WORKER_TESTS); workers=$$?; \
	wait $$pure; pure=$$?; echo "NSQD_PY_PURE=1 pytest $(PURE_TESTS):"; cat $(VENV)/pure-tests.log; \
	exit $$((workers || pure))

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml setup.cfg setup.py $(COMPILED)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $$($(BIN)/python -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires']))")
	$(WITH_CCACHE) $(BIN)/pip install -q --no-build-isolation -e '.[test]'
	$(BIN)/nsq-spark-precompile
	touch $(STAMP)

# An sdist and a wheel in $(DIST): the wheel is compiled with mypyc where a C compiler is present (pure Python
# otherwise; so is a build from the sdist on a machine without one). --no-isolation: the venv's setuptools,
# wheel and mypy build it, with no download.
DIST ?= dist
dist: install
	rm -f $(DIST)/nsqd_py-*
	$(WITH_CCACHE) $(BIN)/python -m build --no-isolation --outdir $(DIST) .

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: install
	$(BIN)/python bench/run_bench.py

# Debian packages the benchmarks use (wrk for HTTP load); needs root, as on this project's machines.
bench-deps:
	command -v wrk >/dev/null || (apt-get update && apt-get install -y wrk)

# Debian's Chromium and chromedriver, for the nsqadmin page tests (tests/admin/test_pages.py); needs root.
browser-deps:
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(apt-get update && apt-get install -y chromium chromium-driver)

# Debian's libfaketime, to run an nsqd whose clock is off the driver's (tests/spark/test_available_now_edges.py);
# needs root.
faketime-deps:
	ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || (apt-get update && apt-get install -y libfaketime)

# Debian's ccache, which makes the wheel build of tests/packaging/test_wheel.py reuse the install's compiled objects;
# needs root.
ccache-deps:
	command -v ccache >/dev/null || (apt-get update && apt-get install -y ccache)

# Debian's strace, whose --inject makes one I/O call of nsqd fail (tests/persistence/test_io_faults.py); needs root.
strace-deps:
	command -v strace >/dev/null || (apt-get update && apt-get install -y strace)

# Debian's libfuse2 (fusepy loads it), for the power-loss filesystem of tests/persistence/test_power_loss.py; needs
# root.
fuse-deps:
	ls /usr/lib/*/libfuse.so.2 >/dev/null 2>&1 || (apt-get update && apt-get install -y --no-install-recommends libfuse2)

clean:
	rm -rf $(VENV) build dist *.egg-info *__mypyc*.so
	find nsqd_py -name '*.so' -delete

# The fast subset for the edit-test loop (under a minute): lint, then every test that starts no process
# (in-process nsqd: tests/inprocess.py); `make test` stays the whole suite.
.PHONY: check
check: install
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -q -m "not process" --ignore=tests/spark
