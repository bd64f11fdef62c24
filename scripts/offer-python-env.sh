#!/usr/bin/env bash
# Ensures .venv has what scripts/apple_python_offer.py needs: Apple's app-store-server-library
# (the reference for promotional-offer payloads and JWS) and python-ecdsa (the seeds' signing
# sample, for `storeledger bench sign`). Idempotent; prints the venv's python path.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x scripts/python-env.sh ]; then scripts/python-env.sh >&2 || true; fi
[ -x .venv/bin/python ] || python3 -m venv .venv >&2
if ! .venv/bin/python -c 'import appstoreserverlibrary, ecdsa, jwt' 2>/dev/null; then
  # The library's version is python-env.sh's (its pin); ecdsa only signs the seeds' sample.
  .venv/bin/pip install -q "app-store-server-library==3.1.2" ecdsa >&2
fi
echo "$PWD/.venv/bin/python"
