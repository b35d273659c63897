# The two commands of the README:
#   make conformance   the conformance cases against the QEMU under test, with the summary table
#   make test          everything: ruff, mypy --strict, self-tests and conformance cases
# Both set up what they need: the virtualenv, and a qtest-capable QEMU (Debian trixie's 10.0.13) built once into
# ~/.cache/virtio9p-harness (skipped when QTEST_QEMU_BINARY names your own build).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

# Python's bytecode and pytest's rewritten case modules are cached outside the tree: the checkout
# stays clean (what PYTHONDONTWRITEBYTECODE is usually set for) and no run recompiles ~80 modules
# (0.1-0.3 s per Python process; make test starts dozens).
export PYTHONPYCACHEPREFIX := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/virtio9p-harness/pycache
unexport PYTHONDONTWRITEBYTECODE

PACKAGED_QEMU := /usr/bin/qemu-system-x86_64
TSHARK := /usr/bin/tshark
POSIX_TOOLS := /usr/bin/stress-ng /usr/bin/fio /usr/bin/autoreconf /usr/bin/automake

.PHONY: venv qemu tools conformance test selftest lint clean pipeline-local

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  echo "installing python3-venv (Debian's python needs it for virtualenvs)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv; }
	$(PYTHON) -m venv $(VENV)
	@# pyfuse3 (the mount, the posix family) builds against libfuse3; fuse3 brings fusermount3
	@dpkg-query -W -f '$${Status}\n' libfuse3-dev fuse3 pkg-config gcc python3-dev 2>/dev/null | grep -c '^install ok installed' | grep -qx 5 || { \
	  $(call apt_install,libfuse3-dev fuse3 pkg-config gcc python3-dev); }
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,plot,posix]'
	touch $@

qemu: venv
ifeq ($(QTEST_QEMU_BINARY),)
	$(BIN)/python -m harness qemu build
else
	@echo "using QTEST_QEMU_BINARY=$(QTEST_QEMU_BINARY)"
endif

# For the self-tests: Debian's own QEMU (no qtest accelerator, for the degraded mode) and tshark
# (to prove that Wireshark's 9P dissector reads our captures).
# For the posix family (pytest cases/ -m posix): stress-ng and fio run on the mount, and pjdfstest
# is built from its source with autoconf and automake.
tools: $(PACKAGED_QEMU) $(TSHARK) $(POSIX_TOOLS)

$(POSIX_TOOLS):
	$(call apt_install,stress-ng fio autoconf automake)

$(PACKAGED_QEMU):
	$(call apt_install,qemu-system-x86)

$(TSHARK):
	$(call apt_install,tshark)

apt_install = DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(1) || { \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(1); }

conformance: qemu
	$(BIN)/python -m pytest cases/ $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

selftest: venv tools
	$(BIN)/python -m pytest tests/ $(PYTEST_ARGS)

test: lint qemu tools
	$(BIN)/python -m pytest tests/ cases/ $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) *.egg-info .mypy_cache .ruff_cache

# The GitLab pipeline (.ci/gitlab-ci.yml) run here by gitlab-ci-local in its shell executor, a job at
# a time (each cell's pytest runs -n 2), on matrix $(MATRIX) of .ci/matrix.yml (docs/pipeline.md).
# gitlab-ci-local 4.55.0 is the release tried here, on this machine's Node 20 (the newest need Node
# 22), installed into the cache; its shell isolation copies each job's directory with rsync (apt).
# Each is installed only when missing: a Node from elsewhere stays (nodesource's bundles its npm,
# which Debian's npm conflicts with).
MATRIX ?= small
GITLAB_CI_LOCAL := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/virtio9p-harness/gitlab-ci-local-4.55.0
pipeline-local:
	@command -v rsync >/dev/null || { $(call apt_install,rsync); }
	@command -v npm >/dev/null || { $(call apt_install,nodejs npm); }
	test -x $(GITLAB_CI_LOCAL)/node_modules/.bin/gitlab-ci-local || \
	  npm install --prefix $(GITLAB_CI_LOCAL) --no-audit --no-fund gitlab-ci-local@4.55.0
	$(GITLAB_CI_LOCAL)/node_modules/.bin/gitlab-ci-local --file .ci/gitlab-ci.yml --variable V9P_MATRIX=$(MATRIX) \
	  --shell-isolation --concurrency 1
