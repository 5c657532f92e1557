# Two commands: `make report` (the main job) and `make test`. Each creates or refreshes .venv.
#   TORCH_INDEX  a pip index for torch alone; on a CPU-only machine without a local torch wheel use
#                `make test TORCH_INDEX=https://download.pytorch.org/whl/cpu` (PyPI's torch is the
#                multi-GB CUDA build). Only torch comes from there; its dependencies come from pip's
#                usual indexes with the rest. Empty (the default): torch too comes from those.
#   EXTRAS       the package's extras installed with it (default dev: tests, linters, JupyterLab, browser
#                test); `make venv EXTRAS=` installs what the notebooks and the nightly runner need, no more.
#   constraints.txt pins the tested set (`make constraints` regenerates it from the current venv).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_INDEX ?=
EXTRAS ?= dev
KERNEL := eagle-workbench
PIP := $(BIN)/pip install -q -c constraints.txt

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(PIP) "torch==2.13.0" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) --no-deps)  # its deps come next, pinned
	$(PIP) -e ".$(if $(EXTRAS),[$(EXTRAS)])"
	mkdir -p $(VENV)/.tmp    # ipykernel install leaves an empty tmp*_kernels dir in TMPDIR
	TMPDIR=$(abspath $(VENV))/.tmp $(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) \
		--display-name "Python 3 ($(KERNEL))"
	rm -rf $(VENV)/.tmp
	touch $(STAMP)

.PHONY: venv report test bench lab constraints
venv: $(STAMP)

# The report shows the guard lane's latest night: .ci/run's lane output, else the lane history in the
# upstream cache (labelled with its age when older than this night; one line saying so when neither exists).
UPSTREAM_CACHE := $(or $(WB_UPSTREAM_CACHE),$(HOME)/.cache/eagle-workbench/upstream)
report: $(STAMP)
	$(BIN)/python -m ci.nightly --matrix ci/matrix.yaml --out artifacts/nightly \
	  --lane artifacts/upstream-lane --lane-history $(UPSTREAM_CACHE)/lane_history.jsonl

# The suite on TEST_JOBS pytest-xdist workers (default auto: one per core). Each test file is one unit of
# work (its module fixtures run once), the few longest tests units of their own, the longest units first
# (tests/conftest.py); TEST_JOBS=0 runs it in this process, in file order.
TEST_JOBS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider \
	  $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder)

# The comparison as defined (workbench/experiments/definition.py) on the torch paths; triton in
# Triton's CPU interpreter would take hours at this size (add it with a smaller --num-prompts).
bench: $(STAMP)
	$(BIN)/python -m workbench bench --backends torch_native fa3 flashinfer

# JupyterLab on the venv's kernel only: a notebook whose kernelspec (python3) is not offered gets the
# one kernel of its language_info (python), eagle-workbench, whatever python3 spec the user has.
# It serves the repository root (the package's sources open beside the notebooks) with the notebooks
# folder open; tests/test_lab_browser.py starts JupyterLab with these --ServerApp / --LabApp flags.
# LAB_ARGS: more options for jupyter lab, e.g. `make lab LAB_ARGS="--allow-root --no-browser"`.
LAB_ARGS ?=
lab: $(STAMP)
	$(PIP) -e ".[dev,lab]"
	$(BIN)/jupyter lab --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/notebooks \
		--KernelSpecManager.allowed_kernelspecs=$(KERNEL) --MappingKernelManager.default_kernel_name=$(KERNEL) $(LAB_ARGS)

# The exact tested set: what `pip freeze` shows in the venv after `make test`, minus the project.
constraints: $(STAMP)
	{ echo "# pip freeze after make test (regenerate: make constraints); used as pip -c by the Makefile and CI"; \
	  $(BIN)/pip freeze --exclude-editable | grep -v -i -e '^eagle-workbench' -e '^#' | sed 's/^torch==\([^+]*\)+.*/torch==\1/'; \
	} > constraints.txt.new
	! grep -n ' @ ' constraints.txt.new || { echo "constraints: pin these from an index, not a file or URL" >&2; rm constraints.txt.new; exit 1; }
	mv constraints.txt.new constraints.txt
