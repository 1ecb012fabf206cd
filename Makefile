# The front door. `make help` lists the targets; README.md says which two
# commands set everything up.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
HARNESS := $(PY) -m harness
# The venv's site-packages, where apply-patches installs the patches' own tests.
SITE = $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
PATCH_TESTS = $(SITE)/ray/serve/tests/unit

.DEFAULT_GOAL := help
.PHONY: help setup apply-patches revert-patches patch-status workspace export-patches \
        images up down status bench-load bench-health bench-membership soak ladder-check unit-test patch-test mutation-check integration-test test lint clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 20

$(PY):
	$(PYTHON) -m harness setup

setup: ## create .venv with the pinned ray[serve] (offline, sha256-checked) and the project's deps
	$(PYTHON) -m harness setup

apply-patches: $(PY) ## apply the series to .venv (or to RAY_SRC=path with git am), all or nothing
	$(HARNESS) patches apply

revert-patches: $(PY) ## undo apply-patches in .venv
	$(HARNESS) patches revert

patch-status: $(PY) ## which patches are applied, and which patched files were edited since
	$(HARNESS) patches status

workspace: $(PY) ## build/ray-src: the pinned serve tree plus one commit per patch, to edit with git
	$(HARNESS) patches workspace

export-patches: $(PY) ## write build/ray-src's commits back to patches/ and patches/series
	$(HARNESS) patches export

.PHONY: pr-branches pr-body rebase-check
pr-branches: $(PY) ## one stacked, tested branch per patch on a Ray checkout at the pin: make pr-branches RAY_SRC=path [FORCE=1]
	@test -n "$(RAY_SRC)" || { echo "usage: make pr-branches RAY_SRC=/path/to/ray [FORCE=1] (a stand-in: python -m harness upstream standin)" >&2; exit 2; }
	$(HARNESS) upstream branches $(RAY_SRC) $(if $(FORCE),--force)

pr-body: $(PY) ## a patch's PR description with the latest harness results: make pr-body PATCH=0001
	@test -n "$(PATCH)" || { echo "usage: make pr-body PATCH=0001 (a number from patches/series)" >&2; exit 2; }
	@$(HARNESS) upstream body $(PATCH)

rebase-check: $(PY) ## does each patch apply to, and pass on, another release: make rebase-check RAY_VERSION=2.59.0
	@test -n "$(RAY_VERSION)" || { echo "usage: make rebase-check RAY_VERSION=x.y.z (a release patches/PIN names)" >&2; exit 2; }
	$(HARNESS) upstream rebase-check $(RAY_VERSION)

images: $(PY) ## build the node images: 2.60.0 stock and patched, 2.59.0 stock (only what changed)
	$(HARNESS) images

up: $(PY) ## start a 3-node cluster with the echo app behind the front LB on 127.0.0.1:18000
	$(HARNESS) up

down: $(PY) ## remove every container and network the harness created
	$(HARNESS) down --all

status: $(PY) ## list the harness's containers
	$(HARNESS) status --all

unit-test: $(PY) ## fast tests: harness logic, patch tooling (no Docker)
	$(PY) -m pytest -m "not integration" -q

patch-test: apply-patches ## the patches' own unit tests, in Ray's tree, against the patched venv
	$(PY) -m pytest -q -p no:cacheprovider $(PATCH_TESTS)

mutation-check: apply-patches ## remove each guarded piece of the push-health patches; a test must fail
	$(PY) -m harness.mutation --site-packages $(SITE)

integration-test: $(PY) ## the main job: real clusters in Docker, real HAProxy, real HTTP
	$(PY) -m pytest -m integration -s -v

# pytest exits 5 when it collected nothing: that is a broken suite, not a pass.
test: mutation-check ## every test: mutation check, unit, the patches' tests, integration
	@$(PY) -m pytest -s -v -p no:cacheprovider tests/unit $(PATCH_TESTS) tests/integration; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	  exit $$rc

bench-load: $(PY) ## generator capacity vs the cluster's rate, measured in one run
	$(HARNESS) bench load

bench-health: $(PY) ## controller probe submissions and CPU per health period, pull vs push
	$(HARNESS) bench health

bench-membership: $(PY) ## HAProxy reloads and change-to-routing latency per replica change, stock vs patched
	$(HARNESS) bench membership

SOAK_RUNS ?= 3
SOAK_MINUTES ?= 10
soak: $(PY) ## spot preemption every ~3 min under load, seed-002 ladder vs Ray defaults (SOAK_RUNS x SOAK_MINUTES each)
	$(HARNESS) soak --runs $(SOAK_RUNS) --minutes $(SOAK_MINUTES)

ladder-check: $(PY) ## check a timeout ladder, orderings A-J: make ladder-check FILE=examples/ladder/seed-002.yaml
	@test -n "$(FILE)" || { echo "usage: make ladder-check FILE=path.yaml (see examples/ladder/)" >&2; exit 2; }
	$(HARNESS) ladder check $(FILE)

lint: $(PY) ## ruff
	$(PY) -m ruff check harness tests

clean: ## remove build/ (wheelhouse, workspace) and .venv; images stay
	rm -rf build $(VENV)
