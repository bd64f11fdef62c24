#!/usr/bin/env bash
# Installs the Debian packages StoreLedger needs, only those missing (apt-get; run as root or with sudo).
# chromium is for the tests only: headless, it renders the support page (SupportPageChromiumTests).
# The Swift toolchain itself is a prerequisite (README).
set -euo pipefail
packages=(librdkafka-dev libpq-dev libssl-dev libmicrohttpd-dev pkg-config postgresql kafkacat python3-venv python3-yaml chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "missing Debian packages: ${missing[*]}; run as root, or install them (apt-get install ${missing[*]})" >&2; exit 1; }
    SUDO="sudo"
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
# Debian's postgresql package may start a system cluster; StoreLedger never uses it (it runs its own).
command -v swift >/dev/null || { echo "Swift toolchain not found on PATH (see README)" >&2; exit 1; }
