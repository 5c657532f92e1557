# Two commands: `make report` (the main job) and `make test`. Each creates or refreshes .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

.PHONY: venv report test bench lab
venv: $(STAMP)

report: $(STAMP)
	$(BIN)/python -m ci.nightly --matrix ci/matrix.yaml --out artifacts/nightly

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m workbench bench --backends torch_native triton flashinfer fa3

lab: $(STAMP)
	$(BIN)/pip install -q -e ".[dev,lab]"
	$(BIN)/jupyter lab notebooks/
