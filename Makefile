# Two commands for a newcomer: `make demo` and `make test`. Both set themselves up.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test demo lint typecheck gencheck pytest docs bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall when the project's dependencies change.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[trio,spark]' --group dev
	touch $(STAMP)

test: $(STAMP) lint typecheck gencheck pytest docs

lint: $(STAMP)
	$(BIN)/ruff check src tests tools bench
	$(BIN)/ruff format --check src tests tools bench

typecheck: $(STAMP)
	$(BIN)/mypy

gencheck: $(STAMP)
	$(BIN)/python tools/gen_spec.py --check

pytest: $(STAMP)
	$(BIN)/python -bb -m coverage run -m pytest $(PYTEST_ARGS)
	$(BIN)/python -m coverage report --include='src/amqp_sansio/*'

docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# Until the Trio client lands (issue 4), the demo decodes a real RabbitMQ conversation with our
# codec and runs the codec benchmark against pamqp, pika and py-amqp.
demo: $(STAMP)
	$(BIN)/python examples/wire_trace.py
	$(BIN)/python bench/codec.py --quick

bench: $(STAMP)
	$(BIN)/python bench/codec.py

clean:
	rm -rf $(VENV) docs/_build .mypy_cache .pytest_cache .ruff_cache .coverage .hypothesis
