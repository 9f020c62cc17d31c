PY ?= python3
# benchmarks/ is linted when present
LINT_PATHS := $(wildcard msgtrain tests benchmarks)
.PHONY: install install-test demo test lint typecheck bench all

install:
	$(PY) -m pip install -e .

install-test:
	$(PY) -m pip install -e '.[test,trainers,ray,compression,tree,store-test]'

demo: install
	msgtrain convert sample_logs -o out/demo

lint:
	ruff check $(LINT_PATHS)
	ruff format --check $(LINT_PATHS)

typecheck:
	mypy

test: install-test lint typecheck
	$(PY) -m pytest

bench:
	$(PY) benchmarks/run.py --repeat 1

all: test
