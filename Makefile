# Two entry points do all the set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check typecheck bench clean image

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/cachewarden demo

# mypy cannot follow setuptools' package-dir mapping, so it checks a tree of symlinks that
# mirrors the installed layout (cachewarden/proxy -> proxy, ...).
TC_DIR ?= build/typecheck
typecheck: $(STAMP)
	rm -rf $(TC_DIR)/cachewarden && mkdir -p $(TC_DIR)/cachewarden
	for d in proxy linter rules; do ln -s $(CURDIR)/$$d $(TC_DIR)/cachewarden/$$d; done
	cd $(TC_DIR) && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml -p cachewarden

check: $(STAMP)
	$(BIN)/ruff check proxy linter rules tests bench
	$(BIN)/ruff format --check proxy linter rules tests bench
	$(MAKE) typecheck

test: $(STAMP) check
	$(BIN)/pytest

# The container image, with podman or docker (whichever is installed). OFFLINE=1: no registry and
# no package index needed (a local Debian base image, wheels built here into deploy/wheels).
IMAGE ?= cachewarden:local
ENGINE ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo docker)
BASE_IMAGE ?= $(if $(OFFLINE),localhost/cachewarden-base:bookworm,python:3.11-slim)
# crun fails on some kernels' cgroup set-ups where runc works: podman takes runc when it is there.
RUNTIME ?= $(shell command -v runc >/dev/null 2>&1 && echo runc)
PODMAN_FLAGS = --format docker --ignorefile deploy/Dockerfile.dockerignore $(if $(RUNTIME),--runtime $(RUNTIME))
# Debian bookworm's python3 is 3.11.2, where redis-py also needs async-timeout (< 3.11.3): a newer
# host Python would not fetch it.
OFFLINE_EXTRA_WHEELS ?= 'async-timeout>=4.0.3'
WHEEL_PY = $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY))
IMAGE_FLAGS ?=
image:
	@command -v $(ENGINE) >/dev/null 2>&1 || { echo "make image: neither podman nor docker is installed" >&2; exit 2; }
ifneq ($(OFFLINE),)
	deploy/base-image.sh $(patsubst localhost/%,%,$(BASE_IMAGE)) $(ENGINE)
	$(WHEEL_PY) -m pip wheel -q --wheel-dir deploy/wheels '.[proxy,redis,otel]' setuptools wheel $(OFFLINE_EXTRA_WHEELS)
	rm -f deploy/wheels/cachewarden-*.whl
endif
	$(ENGINE) build -f deploy/Dockerfile $(if $(filter podman,$(notdir $(ENGINE))),$(PODMAN_FLAGS)) \
	  --build-arg BASE_IMAGE=$(BASE_IMAGE) $(if $(OFFLINE),--build-arg PIP_INDEX=--no-index) $(IMAGE_FLAGS) -t $(IMAGE) .

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info
