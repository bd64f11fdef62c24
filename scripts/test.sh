#!/usr/bin/env bash
# The test command (make test, .ci/run): build with warnings as errors, then every test layer.
# Integration tests start the real broker (`storeledger broker`), a private PostgreSQL and all
# workers as separate processes from the built binary.
#
# The suite makes its own keys, chains, receipts and notifications; only the few tests about
# Apple's own bytes read ../shared/fixtures (or $STORELEDGER_FIXTURES) and skip without it. So a
# full run (no arguments) also checks the skip budget: nothing skipped while the fixtures are
# present, at most 5 % skipped without them, so that a new test that silently needs ../shared is
# caught. swift test's own output, closing "Executed N tests" lines included, is passed through.
# A failed run ends with its failed test cases and their errors; a full run's few failures are each
# run once more, alone (see below).
set -euo pipefail
cd "$(dirname "$0")/.."
WERROR=(-Xswiftc -warnings-as-errors)
swift build --build-tests "${WERROR[@]}"
export STORELEDGER_BIN="$PWD/.build/debug/storeledger"
scripts/python-env.sh || echo "test.sh: Apple's Python library unavailable; DecodingTests skip the differential test" >&2  # private .venv for the decode differential test

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# Line-buffered through the pipe, so progress still shows as each test ends.
linebuffered=(); command -v stdbuf >/dev/null && linebuffered=(stdbuf -oL)
# ZombieFencingTests (SIGSTOP past the session timeout) waits on rebalance timing that a loaded
# 2-core machine stretches past its deadline (failed 2 of 5 runs after the relay joined the
# cluster): it runs in `make chaos`, not in the default run. So does ScaleOutTests (members joining
# and leaving for over a minute; under a loaded machine a join can outlast its 90 s readiness wait).
# (ChaosTests runs here at CI size and in `make chaos` at a larger one.)
full=0; default=()
if [ "$#" -eq 0 ]; then full=1; default=(--skip ZombieFencingTests --skip ScaleOutTests); fi
"${linebuffered[@]}" swift test --skip-build "${default[@]}" "$@" | tee "$log" || status=$?

# The names of the test cases that failed in a log, as swift test's --filter takes them (Class/test).
failed_cases() { sed -nE "s/^Test Case '-?\[?([A-Za-z0-9_]+)[. ]([A-Za-z0-9_]+)\]?' failed.*/\1\/\2/p" "$1" | sort -u; }

if [ "$status" -ne 0 ]; then
    failed=$(failed_cases "$log")
    # Repeated at the end, where a CI summary that keeps only the tail still shows them.
    echo "test.sh: the run failed (exit $status); failed test cases and their errors:" >&2
    echo "${failed:-  (none named: the test process itself died; see the last test case above)}" | sed 's/^/  /' >&2
    grep -E ': error: ' "$log" | cut -c1-400 | sed 's/^/  /' >&2 || true
    # A full run whose few failures all pass when run again alone failed on timing, not behaviour (the
    # integration tests run real processes on a loaded 2-core machine). Each is run once more, alone,
    # and named as flaky; one that fails again fails the run. A run that died, or with many failures,
    # is not retried.
    count=$(grep -c . <<<"$failed" || true)
    finished=$(grep -E "^Test Suite '(All tests|Selected tests)' failed" "$log" || true)  # not cut short by a crash
    if [ "$full" -eq 1 ] && [ -n "$failed" ] && [ -n "$finished" ] && [ "$count" -le 3 ]; then
        retry_log=$(mktemp)
        trap 'rm -f "$log" "$retry_log"' EXIT
        for name in $failed; do
            echo "test.sh: running $name again, alone" >&2
            if ! "${linebuffered[@]}" swift test --skip-build --filter "$name\$" | tee "$retry_log"; then
                echo "test.sh: $name failed again" >&2
                exit "$status"
            fi
            grep -qE 'Executed 1 test, with 0 failures' "$retry_log" || { echo "test.sh: $name did not run alone" >&2; exit "$status"; }
            echo "test.sh: FLAKY: $name failed in the full run and passed alone" >&2
        done
        status=0
    fi
fi
[ "$status" -eq 0 ] || exit "$status"
[ "$full" -eq 1 ] || exit 0  # a filtered run is not the suite: no budget

# XCTest's last "Executed" line is the whole run's total.
summary=$(grep -E 'Executed [0-9]+ tests?, with' "$log" | tail -n 1 || true)
run=$(sed -nE 's/.*Executed ([0-9]+) tests?, with.*/\1/p' <<<"$summary")
skipped=$(sed -nE 's/.* with ([0-9]+) tests? skipped.*/\1/p' <<<"$summary")
skipped=${skipped:-0}
if [ -z "$run" ]; then
    echo "test.sh: no XCTest summary line found; cannot check the skip budget" >&2
    exit 1
fi
fixtures=${STORELEDGER_FIXTURES:-$PWD/../shared/fixtures}
if [ -d "$fixtures" ]; then
    if [ "$skipped" -gt 0 ]; then
        echo "test.sh: $skipped of $run tests skipped although $fixtures is present:" >&2
        grep -E "^Test Case '.*' skipped" "$log" >&2 || true
        exit 1
    fi
    echo "test.sh: skip budget met: $run tests, none skipped (fixtures present)"
else
    budget=$((run * 5 / 100))
    if [ "$skipped" -gt "$budget" ]; then
        echo "test.sh: $skipped of $run tests skipped without $fixtures; the budget is 5 % ($budget)." \
             "Tests must generate their data; only tests of Apple's own bytes may need ../shared:" >&2
        grep -E "^Test Case '.*' skipped" "$log" >&2 || true
        exit 1
    fi
    echo "test.sh: skip budget met: $run tests, $skipped skipped without $fixtures (budget $budget, 5 %)"
fi
