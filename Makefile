# The README's two commands: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[torch,mlx,plot,test,compare]"
	touch $(STAMP)

# The main job: the seed's real-world table for the bundled models, then Qwen's own
# measured Qwen-7B run beside both estimates, the seed's worked example and size table.
demo: $(STAMP)
	@export HF_HUB_OFFLINE=1; set -e; \
	echo "== introspect table"; $(BIN)/introspect table; echo; \
	echo "== introspect table --reported qwen-7b"; $(BIN)/introspect table --reported qwen-7b; echo; \
	echo "== introspect table --seed-example --framework torch --device cpu"; \
	$(BIN)/introspect table --seed-example --framework torch --device cpu; echo; \
	echo "== introspect sizes"; $(BIN)/introspect sizes

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Two workers (pytest-xdist): the suite is thousands of small CPU-bound steps; every
# port, file and cache a test uses is its own, so they run side by side.
test: lint
	$(BIN)/python -m pytest -q -n 2

clean:
	rm -rf $(VENV) build *.egg-info
