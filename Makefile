# Entry points. README.md opens with the two that matter:
#   make demo   set up, then deploy the simulated engine to the local systemd
#               test host and sweep a small grid (report + plots + manifest)
#   make test   set up, then run every check and test (what .ci/run runs)
# Everything installs what it needs itself: Debian packages (podman, runc, bubblewrap,
# debootstrap, patch), the hash-locked Python environment, the test-host image.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT := $(CURDIR)
VENV := $(ROOT)/.venv
BIN := $(VENV)/bin
PY := $(BIN)/python
CPU_VENV := $(ROOT)/.venv-sglang-cpu
WHEELHOUSE := $(ROOT)/.whl
RESULTS := $(ROOT)/results
ifndef RUN_ID
RUN_ID := demo-$(shell date -u +%Y%m%dT%H%M%SZ)
endif
# The demo compresses the simulated engine's time x10 (reported in every figure).
SWEEP_ARGS ?= -e sglang_service_sim_speed=10 --repeats 2 --max-tokens 256
# The tuner on the test host: one objective, a small restart budget, compressed time.
TUNE_ARGS ?= --objective single-stream -e sglang_service_sim_speed=20 --max-restarts 8 --no-write

export PATH := $(BIN):$(PATH)
export CONTAINERS_CONF := $(ROOT)/testhost/containers.conf
export ANSIBLE_CONFIG := $(ROOT)/ansible.cfg
export PYTHONPATH := $(ROOT):$(ROOT)/.collections
export PYTHONUNBUFFERED := 1

# bubblewrap: the coding-eval sandbox; gnupg, dpkg-dev: tests/install/aptrepo
# builds and signs a local apt repository.
APT_PACKAGES := podman runc debootstrap patch bubblewrap gnupg dpkg-dev openssh-client

.PHONY: help demo test setup system-packages venv cpu-venv image testhost wheelhouse deploy sweep tune \
        lint sanity manifest manifest-check locks unit host-checks host-checks-run molecule molecule-run molecule-testhost-run service-checks service-checks-run deploy-run \
        rehearsal rehearsal-run clean-testhost fleet-hosts fleet fleet-run clean-fleet-hosts

help:
	@sed -n '2,7p' Makefile

## ---- setup -------------------------------------------------------------
system-packages:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# The controller/test environment, from the hash lock. The machine-wide pip
# configuration (extra local indexes, constraints) is ignored on purpose.
$(VENV)/.stamp: requirements/dev.lock pyproject.toml
	python3 -m venv $(VENV)
	PIP_CONFIG_FILE=/dev/null $(BIN)/pip install -q --disable-pip-version-check --require-hashes --no-deps -r requirements/dev.lock
	sha256sum requirements/dev.lock > $@

# The checkout on the venv's path: repro_py (the tools, and the contract the collection's action plugins
# apply) and .collections (the checkout as the collection ddtree.sglang, linked by scripts/link-collection.sh),
# as `pip install .` and `ansible-galaxy collection install` would make them importable.
CHECKOUT_PTH = $(VENV)/.checkout-pth
$(CHECKOUT_PTH): $(VENV)/.stamp scripts/link-collection.sh
	scripts/link-collection.sh
	printf '%s\n%s\n' '$(ROOT)' '$(ROOT)/.collections' > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/sglang-ddtree-checkout.pth"
	touch $@

venv: $(VENV)/.stamp $(CHECKOUT_PTH)

$(CPU_VENV)/.stamp: patches/tools/make-cpu-venv.sh patches/tools/cpu-venv-constraints.txt
	patches/tools/make-cpu-venv.sh $(CPU_VENV)
	touch $@

cpu-venv: $(CPU_VENV)/.stamp

setup: system-packages venv

image: system-packages
	testhost/build-image.sh

testhost: image
	TESTHOST_SSH_PORT=31022 testhost/up.sh sglang-testhost

# Two test hosts for a fleet sweep (sglang-fleet-1..2, sshd on 127.0.0.1:31031..31032; the
# inventory tests/fleet/inventory): testhost/up-fleet.sh, testhost/down-fleet.sh.
fleet-hosts: image
	testhost/up-fleet.sh 2

# The fleet on those two hosts (tests/fleet/): deployed with site.yml side by side, probed, a 6-config
# sweep over the two with one killed mid-run, a host down at the start left out, then the tuner over the
# two, interrupted and resumed.
fleet: setup image wheelhouse
	$(MAKE) --no-print-directory fleet-run

fleet-run: venv
	testhost/up-fleet.sh 2
	$(BIN)/ansible-playbook -i tests/fleet/inventory site.yml
	SGLANG_TESTHOST=1 FLEET_E2E_RESULTS=$(RESULTS)/fleet-$(RUN_ID) $(PY) -m pytest -q -p no:cacheprovider -s \
	  --durations=0 tests/fleet

wheelhouse: venv
	scripts/build-wheelhouse.sh $(WHEELHOUSE)

# Each stage timed, in order, stopping at the first failure; the times are printed at
# the end and kept in results/FILE (scripts/timed-stages.sh; side lanes run beside it).
TIMED_STAGES := RUN_ID=$(RUN_ID) MAKE="$(MAKE)" scripts/timed-stages.sh

## ---- main job: deploy + sweep on the local test host ---------------------
deploy: setup testhost wheelhouse
	$(MAKE) --no-print-directory deploy-run

deploy-run: venv
	$(BIN)/ansible-playbook -i inventory/local site.yml

sweep: venv
	$(PY) -m repro_py.sweep inventory/local --results $(RESULTS) --run-id $(RUN_ID) $(SWEEP_ARGS)

tune: venv
	$(PY) -m repro_py.tune inventory/local --results $(RESULTS) --run-id tune-$(RUN_ID) $(TUNE_ARGS)

# The demo's stages, each timed; the times are printed at the end (and kept in
# results/demo-stage-times.txt).
DEMO_STAGES := setup image testhost wheelhouse deploy-run sweep
demo:
	@$(TIMED_STAGES) 'make demo' $(RESULTS)/demo-stage-times.txt '$(DEMO_STAGES)'
	@echo "demo: report in $(RESULTS)/$(RUN_ID)/summary.md"
	cd $(RESULTS)/$(RUN_ID) && sha256sum -c --quiet MANIFEST.sha256 && echo "demo: MANIFEST.sha256 verified by sha256sum -c"

## ---- checks and tests ----------------------------------------------------
lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/mypy --strict scripts/check-locks.py
	# the tuner's benchmarks run for an hour before they print: a type error there is found here, not at its end
	$(BIN)/mypy --strict -p benchmarks.tune_vs_grid -p benchmarks.tune_replay -p benchmarks.tune_search_model
	$(BIN)/yamllint -s .
	# ansible-lint puts $$ANSIBLE_HOME/collections (default ~/.ansible) before the checkout: a copy of ddtree.sglang
	# installed there (molecule's prerun installs one) would be linted against in its place, stale
	ANSIBLE_HOME=$(ROOT)/.cache/ansible-lint-home $(BIN)/ansible-lint
	$(PY) scripts/render-variable-docs.py --check
	$(PY) scripts/render-role-defaults.py --check

# ansible-test sanity on the collection ddtree.sglang as a user gets it: built, installed into a fresh path, tested
# there (scripts/ansible-test-sanity.sh; docs/collection.md).
sanity: venv
	scripts/ansible-test-sanity.sh

manifest: venv
	$(PY) -m repro_py.manifest write

manifest-check: venv
	sha256sum -c --quiet MANIFEST.sha256
	$(PY) -m repro_py.manifest verify

locks: venv
	$(PY) scripts/check-locks.py

unit: venv cpu-venv wheelhouse
	REPRO_REQUIRE_SGLANG_CPU=1 SGLANG_CPU_PYTHON=$(CPU_VENV)/bin/python \
	  $(PY) -m pytest -q -m "not testhost" -p no:cacheprovider -n 2 --dist loadfile --durations=25

# The toolchain, driver and model side on a bare Ubuntu 24.04 systemd container:
# site.yml installs the compiler and Python headers, the JIT compile check with the
# real triton/flashinfer wheels, cuda_toolkit's apt method and nvidia_driver against
# a local signed repository, the model check, collect.yml's model checksums.
host-checks: setup image wheelhouse
	$(MAKE) --no-print-directory host-checks-run

# The steps' logs in results/host-checks, emptied first: a failed run shows no step log of an earlier one.
host-checks-run: venv
	rm -rf $(RESULTS)/host-checks
	HOSTCHECKS_LOGS=$(RESULTS)/host-checks tests/install/run-host-checks.sh

molecule: setup image wheelhouse
	$(MAKE) --no-print-directory molecule-run

molecule-run: venv
	$(BIN)/molecule test

# make test's main test host, deployed once: molecule's scenario run on sglang-testhost (inventory/local's host,
# its connection linked into molecule/default/host_vars/sglang-testhost/): destroy, create, prepare, converge
# (site.yml on a fresh host), idempotence, verify, and no destroy: the service checks run on it next.
# --destroy never also skips the sequence's first destroy, so a host left from an earlier run is destroyed first.
molecule-testhost-run: venv
	SGLANG_MOLECULE_INSTANCE=sglang-testhost $(BIN)/molecule destroy
	SGLANG_MOLECULE_INSTANCE=sglang-testhost $(BIN)/molecule test --destroy never

# The operator's path, executed (tests/rehearsal/): REPRODUCE.md's command blocks as written
# on a bare Ubuntu 24.04 controller and host, each in a network namespace of its own
# (local mirrors of the NVIDIA repository, the Python index and the Hub; GPU stand-ins;
# the simulated engine), then the shipped inventory/ct200 and inventory/b300, unchanged,
# through their thin overlays on that host with a vaulted key and an admin key: site.yml,
# a 3-config (ct200) or 4-config (b300) sweep with a failure, gates and bench by hand (ct200 also the tuner).
rehearsal: setup image wheelhouse
	$(MAKE) --no-print-directory rehearsal-run

rehearsal-run: venv
	SGLANG_REHEARSAL=1 REHEARSAL_RESULTS=$(RESULTS)/rehearsal-$(RUN_ID) $(PY) -m pytest -q -p no:cacheprovider -s \
	  --durations=0 tests/rehearsal/test_reproduce.py tests/rehearsal/test_rehearsal.py

# The service on the deployed test host: start limit (deliberate starts vs a
# crash loop), GPU device nodes in the unit's sandbox, API keys out of ps, the
# journal and the artifacts, refusals before a start (GPU memory, compute mode,
# MIG, a taken port) with the server still serving, rollback on its own port,
# drain through the main process.
service-checks: deploy
	$(MAKE) --no-print-directory service-checks-run

service-checks-run: venv
	SGLANG_TESTHOST=1 $(PY) -m pytest -q -p no:cacheprovider --durations=0 tests/deploy/test_service_testhost.py \
	  tests/deploy/test_lease_testhost.py tests/deploy/test_ssh_connection.py tests/deploy/test_collection_testhost.py

# Every stage in order, each timed; the times go to results/stage-times.txt. The main lane: the setup, the unit
# tests, then the main test host sglang-testhost (sshd 31022, service port 31001), deployed once by molecule's
# scenario (create, site.yml, idempotence, verify; molecule-testhost-run), then the service checks on it. `make
# molecule` (its own instance sglang-molecule, sshd 31012, service port 31011) is the same scenario as a user runs
# it; `make deploy` the same site.yml on inventory/local. A failed main-lane stage stops
# the side lanes. Stages with test hosts of their own run in two side lanes beside it (scripts/timed-stages.sh):
# side lane 1, once the wheelhouse has passed: the rehearsal (its own host container operator-testhost on the
# podman network operator-rehearsal, its own controller container and mirrors, results under
# results/rehearsal-RUN_ID; REPRODUCE.md's sweep and the shipped inventories' sweeps), then the fleet (test hosts
# of its own, sglang-fleet-N, on ports nothing else uses; the sweep losing a host, the tuner's end-to-end run on
# test hosts, interrupted and resumed);
# side lane 2, once the unit tests have passed (two test workers of their own until then: the unit tests beside
# more test hosts starve the hosts, whose containers share one cgroup's CPU): the checks that need no test host
# (lint, the manifest, the locks), host-checks (its own bare host sglang-hostchecks, sshd 31053, service port
# 31051, apt repository port 31052), then ansible-test sanity (the venv only, a build and install of its own
# under /tmp).
# A side-lane stage rebuilds nothing: setup, image and the wheelhouse have passed by then; host-checks' own rerun
# of the wheelhouse changes nothing on disk (scripts/build-wheelhouse.sh).
TEST_STAGES := setup image wheelhouse cpu-venv unit molecule-testhost-run service-checks-run
SIDE_LANE_1 := rehearsal-run fleet-run
SIDE_LANE_2 := lint manifest-check locks host-checks-run sanity
test:
	@$(TIMED_STAGES) 'make test' $(RESULTS)/stage-times.txt '$(TEST_STAGES)' '$(SIDE_LANE_1)' wheelhouse \
	  '$(SIDE_LANE_2)' unit

clean-testhost:
	testhost/down.sh sglang-testhost || true

clean-fleet-hosts:
	testhost/down-fleet.sh
