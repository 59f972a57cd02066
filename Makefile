# Set-up from nothing but Python and pip: `make demo`, `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PLUGINS := plugins/memory plugins/sqlite plugins/fcntl-locks plugins/env-credentials plugins/postgres plugins/redis plugins/dashboard
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean dashboard-assets

# tox (through tox-uv) looks for python3.X on PATH. pyenv's shims run only the selected
# version, so put every installed pyenv interpreter's directory on PATH (3.11 first: it stays
# the python3 there); uv never downloads an interpreter of its own (UV_PYTHON_DOWNLOADS=never):
# a missing Python fails its env.
PYENV_ROOT ?= $(HOME)/.pyenv
PYTHON_DIRS := $(foreach v,11 10 12 13,$(firstword $(wildcard $(PYENV_ROOT)/versions/3.$(v).*/bin)))
TOX_ENV := PATH="$(subst $(eval) ,:,$(strip $(PYTHON_DIRS) $(PATH)))" UV_PYTHON_DOWNLOADS=never

# pip's output goes to a log, shown only if the install fails.
$(STAMP): pyproject.toml $(addsuffix /pyproject.toml,$(PLUGINS))
	@echo "setting up $(VENV): core + $(notdir $(PLUGINS)) (log: $(VENV)/install.log)"
	$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install --upgrade pip > $(VENV)/install.log 2>&1 || { tail -40 $(VENV)/install.log; exit 1; }
	@$(BIN)/pip install -e '.[all,testing]' $(addprefix -e ,$(PLUGINS)) 'tox>=4.11' 'tox-uv>=1.11' >> $(VENV)/install.log 2>&1 \
		|| { tail -40 $(VENV)/install.log; exit 1; }
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/workhive demo

# The whole tox matrix, four envs at a time on the 2-core machine: the longest envs (the
# all-py integration suites: fleets starting, waiting on leases and signals) kept the load near
# 1.5-2.5 at two at a time. tox-uv builds each env's virtualenv with uv: pip took about as long
# to install an env as its tests took to run.
test: $(STAMP)
	$(TOX_ENV) $(BIN)/tox run-parallel --parallel 4 --parallel-no-spinner

lint: $(STAMP)
	$(TOX_ENV) $(BIN)/tox run -e lint,types

# The peers each bench compares against are installed for the benches only.
bench: $(STAMP)
	@$(BIN)/pip install -r bench/requirements.txt -e integrations/flatmachines >> $(VENV)/install.log 2>&1 \
		|| { tail -40 $(VENV)/install.log; exit 1; }
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# The dashboard's chart library, from the npm registry at the version package-lock.json pins, copied
# into its static directory (the copies are committed, so installing the dashboard needs no Node).
dashboard-assets:
	cd plugins/dashboard/assets && npm ci --no-audit --no-fund && npm run build

clean:
	rm -rf $(VENV) .tox .workhive
