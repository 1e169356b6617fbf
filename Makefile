# Two entry points do all the set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check typecheck bench clean

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

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info
