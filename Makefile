# pcp-route-processing — `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
PKGS  := ./...
# Integration tests start PostgreSQL and a broker per test binary; two cores
# run two binaries at a time.
TEST_FLAGS ?= -race -count=1 -timeout 20m -p 2

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_\/-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/ingestor and bin/outbox-relay
	$(GO) build -o $(BIN)/ ./cmd/ingestor ./cmd/outbox-relay

.PHONY: image
image: ## container image without Docker (buildah, static musl binaries, FROM scratch) as an OCI archive under bin/
	@bash scripts/image.sh build

.PHONY: test
test: ## every unit and integration test (real PostgreSQL and broker) with -race, and the resilience suite
	@TEST_FLAGS="$(TEST_FLAGS)" bash scripts/test.sh

.PHONY: test/short
test/short: ## the tests without -race, quicker (no test skips under -short: those that need PostgreSQL or a broker start them, as in make test)
	$(GO) test -short -count=1 $(PKGS)

.PHONY: lint
lint: ## go vet, gofmt, the Helm chart checks (helm lint/template, kubeconform -strict, promtool check/test rules, rendered-output tests), asyncapi validate docs/asyncapi.yaml
	$(GO) vet $(PKGS)
	@unformatted=$$(gofmt -l cmd pkg db scripts); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	bash scripts/chart-check.sh
	bash scripts/asyncapi/validate.sh

.PHONY: fuzz
fuzz: ## fuzz the passport parser for FUZZTIME (default 2m)
	$(GO) test ./pkg/passport -run '^$$' -fuzz FuzzParse -fuzztime $${FUZZTIME:-2m}

.PHONY: bench
bench: build ## throughput and latency benchmarks, settings side by side, with ceilings measured in the same run
	@if [ -f scripts/bench.sh ]; then bash scripts/bench.sh; else echo "bench: not yet"; fi

.PHONY: soak
soak: build ## steady state: both binaries at SOAK_RATE for SOAK_MINUTES (30) with churn, retention and a held snapshot; writes soak-report.md
	bash scripts/soak.sh

.PHONY: soak-large
soak-large: build ## relay and retention sweep on a 20M-row retained outbox (SOAK_LARGE_ROWS); writes soak-large-report.md
	SOAK_LARGE=1 bash scripts/soak.sh

.PHONY: run
run: build ## local PostgreSQL + dev broker + migrations + both binaries + sample traffic
	$(GO) build -o .dev/bin/ ./scripts/devrun
	exec .dev/bin/devrun

.PHONY: migrate
migrate: build ## apply migrations to DATABASE_URL
	@test -n "$$DATABASE_URL" || { echo "set DATABASE_URL"; exit 2; }
	$(BIN)/ingestor migrate

.PHONY: clean
clean: ## remove build output and the local dev data
	rm -rf $(BIN) .dev .cache/image
