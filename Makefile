PY ?= python3
.PHONY: install install-test demo test lint typecheck bench all

install:
	$(PY) -m pip install -e .

install-test:
	$(PY) -m pip install -e '.[test,trainers]'

demo: install
	msgtrain convert sample_logs -o out/demo

lint:
	ruff check msgtrain tests benchmarks
	ruff format --check msgtrain tests benchmarks

typecheck:
	mypy

test: install-test lint typecheck
	$(PY) -m pytest

bench:
	$(PY) benchmarks/run.py

all: test
