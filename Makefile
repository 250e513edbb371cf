# Two commands for a newcomer: `make demo` and `make test`. Both set themselves up.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test demo lint typecheck gencheck pytest coverage pytest-other-pythons package-check docs bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall when the project's dependencies change, and to rebuild the C table decoder.
$(STAMP): pyproject.toml hatch_build.py src/amqp_sansio/_speedups.c | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[trio,spark,tools]' --group dev
	touch $(STAMP)

# The checks side by side where they share nothing: lint, types and the generators' freshness
# at once, then the main test run, then the other interpreters' venvs, then their tests beside
# the package check and the docs (each of those mostly waits or runs one core).
test: $(STAMP)
	$(MAKE) --no-print-directory -j3 lint typecheck gencheck
	$(MAKE) --no-print-directory pytest
	$(MAKE) --no-print-directory -j2 .venv-3.12/.installed .venv-3.13/.installed
	$(MAKE) --no-print-directory -j4 pytest-other-pythons package-check docs

lint: $(STAMP)
	$(BIN)/ruff check src tests tools bench examples fuzz hatch_build.py
	$(BIN)/ruff format --check src tests tools bench examples fuzz hatch_build.py

typecheck: $(STAMP)
	$(BIN)/mypy

gencheck: $(STAMP)
	$(BIN)/python tools/gen_spec.py --check
	$(BIN)/python tools/gen_state_docs.py --check
	$(BIN)/python tools/gen_channels.py --check
	$(BIN)/python tools/gen_spec_coverage.py --check
	$(BIN)/python tools/gen_api_docs.py --check

# Node's amqplib drives the embedded broker in tests/amqp_broker/test_clients.py.
NODE_PEER := tests/amqp_broker/node/node_modules/.installed

$(NODE_PEER): tests/amqp_broker/node/package.json tests/amqp_broker/node/package-lock.json
	npm ci --prefix tests/amqp_broker/node --no-audit --no-fund
	touch $(NODE_PEER)

# Two workers, each started with -bb as the controller is; every Spark test on one of them (one
# JVM). PYTEST_WORKERS=0 runs everything in one process.
PYTEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,--tx '$(PYTEST_WORKERS)*popen//python=$(BIN)/python -bb' --dist loadgroup)

pytest: $(STAMP) $(NODE_PEER)
	$(BIN)/python -bb -m pytest $(XDIST) --durations=30 $(PYTEST_ARGS)

# The same run under branch coverage, with its report. Not part of `make test`: tracing every
# line and branch made the run several minutes longer than the budget allows.
coverage: $(STAMP) $(NODE_PEER)
	$(BIN)/python -bb -m pytest $(XDIST) --cov --cov-report= $(PYTEST_ARGS)
	$(BIN)/python -m coverage report --include='src/*'

# The tests that need neither RabbitMQ nor Spark nor Node, on the other interpreters pyenv holds
# (a venv each, with the `test` group only), both at once, half the tests each. qpid-python's
# broker suites (Python 2.7 driving the embedded broker for two minutes of the run) are left to
# the main run: they test the broker's protocol behaviour, which the interpreter does not change.
PORTABLE := AMQP_SANSIO_TESTS=portable
PORTABLE_MARKERS := not rabbitmq and not spark and not node and not qpid_suites
pyenv_python = $(firstword $(wildcard $(HOME)/.pyenv/versions/$(1).*/bin/python$(1)) \
                          $(shell command -v python$(1)))

.venv-%/.installed: pyproject.toml hatch_build.py src/amqp_sansio/_speedups.c
	$(call pyenv_python,$*) -m venv .venv-$*
	.venv-$*/bin/python -m pip install --quiet --upgrade pip
	.venv-$*/bin/python -m pip install --quiet -e '.[trio,tools]' --group test --group package
	touch $@

.PRECIOUS: .venv-%/.installed
pytest-%: .venv-%/.installed
	$(PORTABLE) $(if $(SHARD_$*),AMQP_SANSIO_SHARD=$(SHARD_$*)) .venv-$*/bin/python -bb -m pytest \
		-q -p no:cacheprovider -m "$(PORTABLE_MARKERS)"

# Half the portable tests on each (AMQP_SANSIO_SHARD, tests/conftest.py): every one of them
# runs on 3.11 in the main run and on one of 3.12 and 3.13, in one run's time (both whole
# at once took five and a half minutes). `make pytest-3.12` alone runs them all there.
pytest-other-pythons:
	$(MAKE) -j2 --no-print-directory pytest-3.12 pytest-3.13 SHARD_3.12=0/2 SHARD_3.13=1/2

# The Spark tests on the older PySpark releases amqp_spark supports (4.0, 4.1: no per-trigger
# limits, no AvailableNow, no lag report; tests that need those say so in their skip reason),
# a python3.11 venv each with the `test` group and that PySpark. Not part of `make test` (each
# run starts its own JVM): `make pytest-spark-4.0 pytest-spark-4.1`.
PYSPARK_4.0 := 4.0.5
PYSPARK_4.1 := 4.1.4
SPARK_COMPAT_TESTS := tests/amqp_spark/test_units.py tests/amqp_spark/test_integration.py

.venv-spark-%/.installed: pyproject.toml hatch_build.py src/amqp_sansio/_speedups.c
	$(if $(PYSPARK_$*),,$(error no PySpark pin for $*: set PYSPARK_$* in the Makefile))
	$(PYTHON) -m venv .venv-spark-$*
	.venv-spark-$*/bin/python -m pip install --quiet --upgrade pip
	.venv-spark-$*/bin/python -m pip install --quiet -e '.[trio]' --group test \
	  pyspark==$(PYSPARK_$*) pyarrow==26.0.1 pandas==2.3.3
	touch $@

.PRECIOUS: .venv-spark-%/.installed
# PySpark 4.0/4.1 leave the sockets of their JVM transfers (collect, parquet reads) to the
# garbage collector: the unraisable ResourceWarnings are ignored in these runs only.
pytest-spark-%: .venv-spark-%/.installed
	.venv-spark-$*/bin/python -bb -m pytest -q -p no:cacheprovider \
	  -W ignore::pytest.PytestUnraisableExceptionWarning $(SPARK_COMPAT_TESTS) $(PYTEST_ARGS)

# The sdist built once, a wheel built from it on 3.11, 3.12 and 3.13 and smoke-tested in a fresh
# virtual environment with and without the C speedups, and the sdist installed with no compiler
# (tools/check_package.py): about half a minute. The fresh environments borrow the dependencies
# of the ones the tests use, so nothing is downloaded.
package-check: $(STAMP) .venv-3.12/.installed .venv-3.13/.installed
	$(BIN)/python tools/check_package.py $(VENV) .venv-3.12 .venv-3.13

docs: $(STAMP)
	$(BIN)/sphinx-build -E -W --keep-going -q -b html docs docs/_build/html

# A publish/consume round trip through the Trio client with confirms, a progress bar and the
# throughput: against AMQP_URL (default local RabbitMQ), else the embedded broker. Its own light
# venv with the `trio` extra only (the demo imports nothing else): no Spark, no dev tools.
DEMO_VENV  := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed-demo

$(DEMO_STAMP): pyproject.toml hatch_build.py src/amqp_sansio/_speedups.c
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DEMO_VENV)/bin/python -m pip install --quiet -e '.[trio]'
	touch $(DEMO_STAMP)

# PROTOCOL=0-10 runs it over AMQP 0-10 (the embedded broker serves it; RabbitMQ does not).
demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/python examples/demo.py$(if $(PROTOCOL), --protocol $(PROTOCOL))

# async_amqp (a peer in bench/e2e.py) needs pamqp < 4, so it gets a virtualenv of its own. If
# that cannot be built, say why and benchmark the others.
ASYNC_AMQP_VENV := bench/.venv-async-amqp

$(ASYNC_AMQP_VENV)/.installed:
	@($(PYTHON) -m venv $(ASYNC_AMQP_VENV) \
	  && $(ASYNC_AMQP_VENV)/bin/python -m pip install --quiet async-amqp==0.5.5 trio==0.35.0 \
	  && touch $@) \
	  || echo "bench: could not set up $(ASYNC_AMQP_VENV) (see above); running without async_amqp"

bench: $(STAMP) $(ASYNC_AMQP_VENV)/.installed
	$(BIN)/python bench/codec.py
	$(BIN)/python bench/core.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/e2e.py
	$(BIN)/python bench/broker.py
	$(BIN)/python bench/spark.py

clean:
	rm -rf $(VENV) $(DEMO_VENV) .venv-3.12 .venv-3.13 .venv-spark-4.0 .venv-spark-4.1 build/package-check docs/_build .mypy_cache .pytest_cache .ruff_cache .coverage .hypothesis
