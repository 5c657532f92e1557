# Two commands: `make report` (the main job) and `make test`. Each creates or refreshes .venv.
#   PY           the interpreter the venv is made from: Python 3.11.5 or a later 3.11 (constraints.txt is
#                frozen on 3.11); any other version stops the build naming the one found (`PY=python3.11`).
#   TORCH_INDEX  a pip index for torch alone. Not set (the default): a torch 2.13.0 wheel pip finds without
#                an index (its find-links, or one already installed) is used; otherwise torch comes from
#                PyTorch's CPU index on a machine without `nvidia-smi`, and from pip's usual indexes (PyPI's
#                CUDA build) on one with it. Set (e.g. `TORCH_INDEX=https://download.pytorch.org/whl/cu128`,
#                or empty for pip's usual indexes): torch comes from there. Only torch comes from it; its
#                dependencies come from pip's usual indexes with the rest.
#   EXTRAS       the package's extras installed with it (default dev: tests, linters, JupyterLab, browser
#                test); `make venv EXTRAS=` installs what the notebooks and the nightly runner need, no more.
#   constraints.txt pins the tested set (`make constraints` regenerates it from the current venv).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CPU_INDEX := https://download.pytorch.org/whl/cpu
ifeq ($(origin TORCH_INDEX),undefined)
TORCH_LOCAL := 1
TORCH_INDEX := $(if $(shell command -v nvidia-smi 2>/dev/null),,$(CPU_INDEX))
endif
# Python 3.11, 3.11.5 or later: constraints.txt was frozen on 3.11 and some of its pins (soupsieve 4.1.3)
# need 3.11.5; any other interpreter stops the build here, naming the version it found
PY_CHECK := import sys; v = sys.version_info; sys.exit(None if v[:2] == (3, 11) and v.micro >= 5 else \
  "make: Python %d.%d.%d found (%s): this project supports Python 3.11.5 or a later 3.11 \
(constraints.txt is frozen on 3.11). Use one: make ... PY=python3.11 (after rm -rf .venv if it was made with another)" \
  % (*v[:3], sys.executable))
EXTRAS ?= dev
KERNEL := eagle-workbench
PIP := $(BIN)/pip install -q -c constraints.txt

$(STAMP): pyproject.toml constraints.txt
	@$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY)) -c '$(PY_CHECK)'
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(if $(TORCH_LOCAL),$(PIP) --no-index --no-deps "torch==2.13.0" 2>/dev/null ||) \
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
	$(BIN)/python -m workbench_ci.nightly --matrix ci/matrix.yaml --out artifacts/nightly \
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
# The release kernels `workbench upstream kernel --sglang X` registered (sglang-*, notebook 07) are offered too.
# LAB_ARGS: more options for jupyter lab, e.g. `make lab LAB_ARGS="--allow-root --no-browser"`.
LAB_ARGS ?=
lab: $(STAMP)
	$(PIP) -e ".[dev,lab]"
	$(BIN)/jupyter lab --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/notebooks \
		--KernelSpecManager.allowed_kernelspecs=$(KERNEL) --MappingKernelManager.default_kernel_name=$(KERNEL) \
		$(foreach k,$(shell ls "$$($(BIN)/jupyter --data-dir)/kernels" 2>/dev/null | grep '^sglang-'),--KernelSpecManager.allowed_kernelspecs=$(k)) \
		$(LAB_ARGS)

# The exact tested set: what `pip freeze` shows in the venv after `make test`, minus the project.
constraints: $(STAMP)
	{ echo "# pip freeze after make test (regenerate: make constraints); used as pip -c by the Makefile and CI"; \
	  $(BIN)/pip freeze --exclude-editable | grep -v -i -e '^eagle-workbench' -e '^#' | sed 's/^torch==\([^+]*\)+.*/torch==\1/'; \
	} > constraints.txt.new
	! grep -n ' @ ' constraints.txt.new || { echo "constraints: pin these from an index, not a file or URL" >&2; rm constraints.txt.new; exit 1; }
	mv constraints.txt.new constraints.txt
