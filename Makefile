PY ?= python3
# benchmarks/ is linted when present
LINT_PATHS := $(wildcard msgtrain tests benchmarks)
.PHONY: install install-test demo test lint typecheck bench all

install:
	$(PY) -m pip install -e .

# torch first, at the release the suite is checked with (CPU wheel, kept on this machine): the extras' range
# (torch>=2.4) would otherwise let a clean install pull the newest multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0

install-test:
	$(PY) -m pip install '$(TORCH_PIN)'
	$(PY) -m pip install -e '.[test,lint,trainers,ray,compression,tree,store-test,plot,mistral]'
	# llama.cpp's vocab-only GGUF files and chat templates, from the llama-cpp-python sdist (tests/assets.py)
	$(PY) -m tests.assets

demo: install
	msgtrain convert sample_logs -o out/demo

lint:
	ruff check $(LINT_PATHS)
	ruff format --check $(LINT_PATHS)
	lint-imports

typecheck:
	mypy

# Test files run on TEST_WORKERS processes (pytest-xdist), each file whole on one worker (its module fixtures are
# built once), in the order tests/conftest.py gives them (the costliest files first, so the workers finish together);
# TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= 2

test: install-test lint typecheck
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

bench:
	$(PY) benchmarks/run.py --repeat 1

all: test
