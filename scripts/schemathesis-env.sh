#!/usr/bin/env bash
# Private virtualenv (.venv-schemathesis) with schemathesis, for the OpenAPI contract test
# (Tests/IntegrationTests/OpenAPIContractTests.swift). Idempotent: a ready venv returns at once.
# Prints the `st` path on success; exits non-zero with a clear message if PyPI cannot be reached.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="4.32.5"
VENV=.venv-schemathesis
if [ -x "$VENV/bin/st" ] && "$VENV/bin/python" -c "import importlib.metadata as m; assert m.version('schemathesis') == '$VERSION'" 2>/dev/null; then
    echo "$PWD/$VENV/bin/st"
    exit 0
fi
"${PYTHON:-python3}" -m venv "$VENV"
if ! "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$VERSION" >/tmp/storeledger-schemathesis-pip.log 2>&1; then
    echo "schemathesis-env: could not install schemathesis==$VERSION from PyPI (see /tmp/storeledger-schemathesis-pip.log)" >&2
    exit 1
fi
echo "$PWD/$VENV/bin/st"
