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

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/introspect table
	HF_HUB_OFFLINE=1 $(BIN)/introspect estimate --params 7e9 --layers 33 --d-emb 4096 \
		--heads 32 --vocab 43520 --batch 1 --seq 2048 --act-dtype bf16
	HF_HUB_OFFLINE=1 $(BIN)/introspect sizes

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info
