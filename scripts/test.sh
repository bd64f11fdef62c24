#!/usr/bin/env bash
# The test command (make test, .ci/run): build with warnings as errors, then every test layer.
# Integration tests start the real broker (`storeledger broker`), a private PostgreSQL and all
# workers as separate processes from the built binary.
set -euo pipefail
cd "$(dirname "$0")/.."
WERROR=(-Xswiftc -warnings-as-errors)
swift build --build-tests "${WERROR[@]}"
export STORELEDGER_BIN="$PWD/.build/debug/storeledger"
scripts/python-env.sh || echo "test.sh: Apple's Python library unavailable; DecodingTests skip the differential test" >&2  # private .venv for the decode differential test
swift test --skip-build "$@"
