# fencepost: `make demo` builds everything and runs the main job;
# `make test` builds everything and runs every test. Both start from a fresh clone.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-installed

.PHONY: all build demo test test-rust test-python bench clean lab-deps lint

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

test: build lab-deps test-rust test-python

# The lab's tools (`fencepost lab`, tests/test_lab.py): iproute2 builds namespaces, iptables is
# the seed article's impairment, iperf3 and ping measure the emulator. Installed from Debian's
# packages when running as root and missing; elsewhere the lab tests say what is missing.
LAB_TOOLS := ip:iproute2 iptables:iptables iperf3:iperf3 ping:iputils-ping
lab-deps:
	@missing=""; for pair in $(LAB_TOOLS); do cmd=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -z "$$missing" ]; then echo "lab tools present"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing lab tools:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else echo "lab tools missing:$$missing (install them as root to run the lab and its tests)"; fi

test-rust:
	cargo test --workspace

test-python: $(STAMP)
	$(VPY) -m pytest -q

# Clippy over every crate and target, warnings as errors (the workspace is clean of them).
lint:
	cargo clippy --workspace --all-targets --release -- -D warnings

bench: build
	bash bench/sim_speed.sh
	bash bench/core_speed.sh
	$(VPY) bench/sweep_speedup.py
	$(VPY) bench/python_controller.py
	bash bench/loopback.sh
	$(VPY) bench/peers.py
	bash bench/connections.sh
	$(VPY) bench/idle_memory.py

clean:
	cargo clean
	rm -rf $(VENV)
