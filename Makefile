# The two commands of the README: `make run` (StoreLedger with embedded defaults) and `make test`.
SWIFT ?= swift
WERROR = -Xswiftc -warnings-as-errors
RUN_ARGS ?= --demo

.PHONY: run test chaos deps build release bench fuzz clean

deps:
	@scripts/install-deps.sh

build: deps
	$(SWIFT) build $(WERROR)

release: deps
	$(SWIFT) build -c release $(WERROR)

## Starts broker, PostgreSQL, migrations, ingest and all workers, drives a short demo, stays up until Ctrl-C.
run: release
	.build/release/storeledger dev --catalog deploy/catalog.example.json $(RUN_ARGS)

## Installs, builds with warnings as errors, runs unit, adapter and integration tests.
test: deps
	scripts/test.sh

## Fault-injection tests kept out of make test (SIGSTOP past the session timeout).
chaos: deps
	scripts/test.sh --filter ZombieFencingTests

bench: release
	.build/release/storeledger bench all

## libFuzzer over the receipt, JWS and notification decoders: make fuzz FUZZ_SECONDS=600
FUZZ_SECONDS ?= 60
fuzz: deps
	scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf .build
