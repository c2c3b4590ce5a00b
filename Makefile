# fencepost: `make demo` builds everything and runs the main job;
# `make test` builds everything and runs every test. Both start from a fresh clone.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-installed

.PHONY: all build demo test test-rust test-python bench clean

all: build

$(STAMP): requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# Builds the Rust workspace and installs the Python package (with its native module) into .venv.
build: $(STAMP)
	cargo build --release --workspace
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --quiet

demo: build
	$(VENV)/bin/fencepost demo

test: build test-rust test-python

test-rust:
	cargo test --workspace

test-python: $(STAMP)
	$(VPY) -m pytest -q

bench: build
	bash bench/sim_speed.sh
	$(VPY) bench/sweep_speedup.py
	$(VPY) bench/python_controller.py
	bash bench/loopback.sh
	bash bench/connections.sh

clean:
	cargo clean
	rm -rf $(VENV)
