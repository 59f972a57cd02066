# Set-up from nothing but Python and pip: `make demo`, `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PLUGINS := plugins/memory plugins/sqlite plugins/fcntl-locks plugins/env-credentials
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml $(addsuffix /pyproject.toml,$(PLUGINS))
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[testing]' $(addprefix -e ,$(PLUGINS)) 'tox>=4.11' 'httpx>=0.27'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/workhive demo

# The whole tox matrix, two envs at a time (the machine has two cores).
test: $(STAMP)
	$(BIN)/tox run-parallel --parallel 2 --parallel-no-spinner

lint: $(STAMP)
	$(BIN)/tox run -e lint,types

bench: $(STAMP)
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .tox .workhive
