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

## The chaos test at a larger size (kills, PostgreSQL restart, broker faults; docs/configuration.md; make test
## runs it CI-sized), zombie fencing and the scale-out rebalance test (docs/scaling.md): those two are not part
## of make test (scripts/test.sh says why).
CHAOS_USERS ?= 60
CHAOS_KILLS ?= 60
CHAOS_RATE ?= 25
chaos: deps
	STORELEDGER_CHAOS_USERS=$(CHAOS_USERS) STORELEDGER_CHAOS_KILLS=$(CHAOS_KILLS) STORELEDGER_CHAOS_RATE=$(CHAOS_RATE) \
		scripts/test.sh --filter 'ChaosTests|ZombieFencingTests|ScaleOutTests'


bench: release
	.build/release/storeledger bench all

## libFuzzer over the receipt, JWS and notification decoders: make fuzz FUZZ_SECONDS=600
FUZZ_SECONDS ?= 60
fuzz: deps
	scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf .build
