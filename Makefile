# The front door. `make help` lists the targets; README.md says which two
# commands set everything up.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
HARNESS := $(PY) -m harness
# The venv's site-packages, where apply-patches installs the patches' own tests:
# asked of the harness, so it is the folder apply-patches wrote to.
SITE = $(shell $(PY) -c 'from harness.core.venv import site_packages; print(site_packages())')
PATCH_TESTS = $(SITE)/ray/serve/tests/unit
# What needs the patched venv: the patches' tests, and the harness's tests
# against the patched code (tests/patched, outside pytest's testpaths so that
# `make unit-test` runs on a stock venv too).
PATCHED_TESTS = tests/patched $(PATCH_TESTS)

# GNU make exits 2 whenever a recipe fails, whatever code the recipe exited with: its
# own status is only ever 0, 2, or 1 under -q (so its manual says, and GNU make 4.3 here
# does so with .ONESHELL, `exit $$rc` and -k alike). So no target can exit with the
# harness's 1 or 3. Every harness run goes through `$(call harness_run,COMMAND)`: it
# echoes COMMAND as make would, runs it, and on failure says the harness's own code and
# what it means, then fails with that code (make's "Error N" line repeats it). A script
# that needs the code itself runs .venv/bin/python -m harness VERB (README: Exit codes).
# harness_rc alone is that failure report, for a run that must not echo (pr-body).
harness_rc = || { rc=$$?; case $$rc in 1) what='the verdict failed';; 2) what='bad usage or input';; 3) what='unknown: no verdict';; 130) what='interrupted';; *) what='see above';; esac; echo "make $@: the harness exited $$rc ($$what); make exits 2 for any failure, so for the harness's own code run: $(subst ",\",$(1))" >&2; exit $$rc; }
harness_run = echo "$(subst ",\",$(1))"; $(1) $(call harness_rc,$(1))

.DEFAULT_GOAL := help
.PHONY: help setup apply-patches revert-patches patch-status workspace export-patches check-patches \
        images up down status bench-load bench-health bench-membership bench-keepalive bench-stop bench-controller-loop soak ladder-check unit-test patch-test mutation-check integration-test test lint clean

help: ## list the targets, then the scenarios
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 20
	@echo; echo "scenarios: what each exercises, and the images it compares by default:"
	@if [ -x $(PY) ]; then $(call harness_run,$(HARNESS) scenarios); else echo "  (listed once $(PY) exists: make setup)"; fi

$(PY):
	@$(call harness_run,$(PYTHON) -m harness setup)

setup: ## create .venv with the pinned ray[serve] (offline, sha256-checked) and the project's deps
	@$(call harness_run,$(PYTHON) -m harness setup)

apply-patches: $(PY) ## apply the series to .venv (or to RAY_SRC=path with git am), all or nothing
	@$(call harness_run,$(HARNESS) patches apply)

revert-patches: $(PY) ## undo apply-patches in .venv
	@$(call harness_run,$(HARNESS) patches revert)

patch-status: $(PY) ## which patches are applied, and which patched files were edited since
	@$(call harness_run,$(HARNESS) patches status)

workspace: $(PY) ## build/ray-src: the pinned serve tree plus one commit per patch, to edit with git
	@$(call harness_run,$(HARNESS) patches workspace)

export-patches: $(PY) ## write build/ray-src's commits back to patches/ and patches/series; CHECK=1: write nothing, fail naming the files it would change
	@$(call harness_run,$(HARNESS) patches export $(if $(CHECK),--check))

check-patches: $(PY) ## fail unless patches/ is exactly what an export writes (from a workspace built afresh from the pinned wheel; needs no build/ray-src) and each patch applies and passes its own tests on the pin with only what its message says it is stacked on
	@$(call harness_run,$(HARNESS) patches export --check --fresh)
	@$(call harness_run,$(HARNESS) upstream stacks)

.PHONY: pr-branches pr-body upstream-lint upstream-tests rebase-check
pr-branches: $(PY) ## one tested branch per patch (the pin, its stack, the patch) on a Ray checkout at the pin: make pr-branches RAY_SRC=path [FORCE=1]
	@test -n "$(RAY_SRC)" || { echo "usage: make pr-branches RAY_SRC=/path/to/ray [FORCE=1] (a stand-in: python -m harness upstream standin)" >&2; exit 2; }
	@$(call harness_run,$(HARNESS) upstream branches $(RAY_SRC) $(if $(FORCE),--force))

pr-body: $(PY) ## a patch's PR description with the latest harness results: make pr-body PATCH=0001
	@test -n "$(PATCH)" || { echo "usage: make pr-body PATCH=0001 (a number from patches/series)" >&2; exit 2; }
	@$(HARNESS) upstream body $(PATCH) $(call harness_rc,$(HARNESS) upstream body $(PATCH))

upstream-lint: $(PY) ## Ray's own lint over what the series adds or changes: ruff and black at Ray's pins, pydoclint (new violations), docstyle, the pytest trailer
	@$(call harness_run,$(HARNESS) upstream lint)

upstream-tests: $(PY) ## Ray's own unit tests of the files the series changes, stock vs patched, flags off and on (files in build/upstream-tests/; FETCH_FROM=/path/to/ray-clone to get them)
	@$(call harness_run,$(HARNESS) upstream tests $(if $(FETCH_FROM),--fetch-from $(FETCH_FROM)))

rebase-check: $(PY) ## does each patch apply to, and pass on, another release: make rebase-check RAY_VERSION=2.59.0
	@test -n "$(RAY_VERSION)" || { echo "usage: make rebase-check RAY_VERSION=x.y.z (a release patches/PIN names)" >&2; exit 2; }
	@$(call harness_run,$(HARNESS) upstream rebase-check $(RAY_VERSION))

images: $(PY) ## build the node images: 2.60.0 stock and patched, 2.59.0 stock (only what changed)
	@$(call harness_run,$(HARNESS) images)

up: $(PY) ## start a 3-node cluster with the echo app behind the front LB on 127.0.0.1:18000
	@$(call harness_run,$(HARNESS) up)

down: $(PY) ## remove every container and network the harness created, live runs' too (`python -m harness down`: only what dead runs left)
	@$(call harness_run,$(HARNESS) down --all)

status: $(PY) ## list the harness's containers
	@$(call harness_run,$(HARNESS) status --all)

unit-test: $(PY) ## fast tests: harness logic, patch tooling (no Docker)
	$(PY) -m pytest -m "not integration" -q

patch-test: apply-patches ## the patches' own unit tests, in Ray's tree, and the harness's tests of them, against the patched venv
	$(PY) -m pytest -q -p no:cacheprovider $(PATCHED_TESTS)

mutation-check: apply-patches ## remove each guarded piece of the push-health patches; a test must fail
	@$(call harness_run,$(PY) -m harness.patches.mutation --site-packages $(SITE))

integration-test: $(PY) ## the main job: real clusters in Docker, real HAProxy, real HTTP
	$(PY) -m pytest -m integration -s -v

# make test in two stages. First two lanes side by side: the nemesis tests, which
# mostly wait on one cluster's timers (~165 s here), and a lane that runs the
# mutation check and the unit and patches' tests (CPU work, at a lower priority),
# then the smoke and interrupt tests (~80 s, their clusters mostly waiting too).
# The unit and patches' tests spend most of their time waiting on HAProxy's
# timers (135 s wall for 49 s of CPU one at a time), so they run on four pytest
# workers: 59-70 s. The lane logs into $(FAST_LOG), printed whole if it failed.
# Stage 1 took 199-220 s this way against 239 s with the smoke and interrupt tests
# after the nemesis tests and the unit tests one at a time. On a fresh machine
# an image build runs beside (CI's); a cluster test waits for the layer it needs.
# The scenarios, whose timing is part of what they judge, run after it on a quiet
# host: with the CPU group beside them too, a run flaked.
# bash, since a background job of dash ignores SIGINT and so would every process
# it starts (a Ctrl-C test among them); `trap - INT` gives the job Ctrl-C back.
# pytest exits 2 when interrupted, not by the signal, so without `trap 'exit 130'
# INT` the recipe would go on to the next stage after a Ctrl-C.
# pytest exits 5 when it collected nothing: that is a broken suite, not a pass.
FAST_LOG := build/test-fast.log
TEST_WORKERS := -n 4 --dist worksteal
NEMESIS_TESTS := tests/integration/test_nemesis.py
AFTER_CPU_TESTS := tests/integration/test_smoke.py tests/integration/test_interrupt.py
test: SHELL := /bin/bash
test: apply-patches ## every test: the nemesis tests beside the mutation check, unit and the patches' tests, smoke and interrupt; then the scenarios
	@trap 'exit 130' INT; mkdir -p build; \
	( trap - INT; nice -n 10 $(MAKE) --no-print-directory mutation-check && \
	  nice -n 10 $(PY) -m pytest -v -p no:cacheprovider $(TEST_WORKERS) tests/unit $(PATCHED_TESTS) && \
	  $(PY) -m pytest -s -v -p no:cacheprovider $(AFTER_CPU_TESTS) ) >$(FAST_LOG) 2>&1 & fast=$$!; \
	$(PY) -m pytest -s -v -p no:cacheprovider $(NEMESIS_TESTS); beside=$$?; \
	wait $$fast; fast_rc=$$?; \
	echo "make test: beside them, the mutation check, the unit and patches' tests, smoke and interrupt (log: $(FAST_LOG)):"; \
	if [ $$fast_rc -eq 0 ]; then grep -E '^[0-9]+ of [0-9]+ mutations caught|^=+ .*(passed|failed|error)' $(FAST_LOG); else cat $(FAST_LOG); fi; \
	$(PY) -m pytest -s -v -p no:cacheprovider tests/integration $(addprefix --ignore=,$(NEMESIS_TESTS) $(AFTER_CPU_TESTS)); rest=$$?; \
	for rc in $$fast_rc $$beside $$rest; do \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	  if [ $$rc -ne 0 ]; then exit $$rc; fi; \
	done

bench-load: $(PY) ## generator capacity vs the cluster's rate, measured in one run
	@$(call harness_run,$(HARNESS) bench load)

bench-health: $(PY) ## controller cost of health checks at several sizes, pull vs push: make bench-health [ARGS="--sizes 16,48 --repeats 2"]
	@$(call harness_run,$(HARNESS) bench health $(ARGS))

bench-membership: $(PY) ## what a replica change costs HAProxy, stock vs runtime servers, through the controller and at 16/64/256 servers: make bench-membership [ARGS="--sizes 16,64 --rounds 10"]
	@$(call harness_run,$(HARNESS) bench membership $(ARGS))

bench-keepalive: $(PY) ## what closing after streamed responses costs keep-alive clients, off vs on
	@$(call harness_run,$(HARNESS) bench keepalive)

bench-controller-loop: $(PY) ## the controller's deployment-state update at 1,000-8,000 replicas, pull vs push: make bench-controller-loop [ARGS="--sizes 1000,4000 --repeats 2"]
	@$(call harness_run,$(HARNESS) bench controller-loop $(ARGS))

bench-stop: $(PY) ## how long an idle ingress replica takes to stop, force-kill budget covering the request timeout off vs on
	@$(call harness_run,$(HARNESS) bench stop)

SOAK_RUNS ?= 3
SOAK_MINUTES ?= 10
SOAK_PARALLEL ?= 2
SOAK_MODE ?=
VOLUME_REQUESTS ?= 1000000
soak: $(PY) ## spot preemption every ~3 min under load, spot-notice ladder vs Ray defaults (SOAK_RUNS x SOAK_MINUTES each, SOAK_PARALLEL at once); SOAK_MODE=volume VOLUME_RATE=r [VOLUME_REQUESTS=n]: stock vs patched at volume (SOAK_MODE=find-rate measures r)
ifeq ($(SOAK_MODE),volume)
	@$(call harness_run,$(HARNESS) soak --volume $(if $(VOLUME_RATE),--rate $(VOLUME_RATE)) --requests $(VOLUME_REQUESTS))
else ifeq ($(SOAK_MODE),find-rate)
	@$(call harness_run,$(HARNESS) soak --find-rate)
else ifneq ($(SOAK_MODE),)
	@echo "make soak: SOAK_MODE is volume, find-rate or unset (the spot-notice soak), not '$(SOAK_MODE)'" >&2; exit 2
else
	@$(call harness_run,$(HARNESS) soak --runs $(SOAK_RUNS) --minutes $(SOAK_MINUTES) --parallel $(SOAK_PARALLEL))
endif

ladder-check: $(PY) ## check a timeout ladder, orderings A-J: make ladder-check FILE=examples/ladder/spot-notice-ladder.yaml
	@test -n "$(FILE)" || { echo "usage: make ladder-check FILE=path.yaml (see examples/ladder/)" >&2; exit 2; }
	@$(call harness_run,$(HARNESS) ladder check $(FILE))

lint: $(PY) ## ruff check, ruff format --check, mypy over harness/, and the import layers
	$(PY) -m ruff check harness tests
	$(PY) -m ruff format --check harness tests
	$(PY) -m mypy
	$(PY) -m pytest -q -p no:cacheprovider tests/unit/test_layers.py

clean: ## remove build/ (wheelhouse, workspace) and .venv; images stay
	rm -rf build $(VENV)
