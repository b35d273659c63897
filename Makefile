# The two commands of the README:
#   make conformance   the conformance cases against the QEMU under test, with the summary table
#   make test          everything: ruff, mypy --strict, self-tests and conformance cases
# Both set up what they need: the virtualenv, and a qtest-capable QEMU built once into
# ~/.cache/virtio9p-harness (skipped when QTEST_QEMU_BINARY names your own build).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

PACKAGED_QEMU := /usr/bin/qemu-system-x86_64

.PHONY: venv qemu packaged-qemu conformance test selftest lint clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  echo "installing python3-venv (Debian's python needs it for virtualenvs)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

qemu: venv
ifeq ($(QTEST_QEMU_BINARY),)
	$(BIN)/python -m harness qemu build --with-qos-test
else
	@echo "using QTEST_QEMU_BINARY=$(QTEST_QEMU_BINARY)"
endif

# Debian's own binary (no qtest accelerator): the self-tests check the degraded mode on it.
packaged-qemu: $(PACKAGED_QEMU)

$(PACKAGED_QEMU):
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends qemu-system-x86 || { \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends qemu-system-x86; }

conformance: qemu
	$(BIN)/python -m pytest cases/ $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

selftest: venv packaged-qemu
	$(BIN)/python -m pytest tests/ $(PYTEST_ARGS)

test: lint qemu packaged-qemu
	$(BIN)/python -m pytest tests/ cases/ $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) *.egg-info .mypy_cache .ruff_cache
