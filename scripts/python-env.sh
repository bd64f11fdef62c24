#!/usr/bin/env bash
# Private Python virtualenv (.venv) with Apple's official App Store Server Library, for the
# differential test and `storeledger bench decode`. Idempotent: a ready venv returns at once.
# Prints nothing on success; exits non-zero with a clear message if PyPI cannot be reached.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="3.1.2"
if [ -x .venv/bin/python ] && .venv/bin/python -c "import appstoreserverlibrary, importlib.metadata as m; assert m.version('app-store-server-library') == '$VERSION'" 2>/dev/null; then
    exit 0
fi
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m venv .venv
if ! .venv/bin/pip install --quiet --disable-pip-version-check "app-store-server-library==$VERSION" >/tmp/storeledger-pip.log 2>&1; then
    echo "python-env: could not install app-store-server-library==$VERSION from PyPI (see /tmp/storeledger-pip.log)" >&2
    exit 1
fi
