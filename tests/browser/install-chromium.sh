#!/usr/bin/env bash
# Installs Debian's chromium for the browser tests, as the chaos harness
# installs iptables: only when /usr/bin/chromium is missing, quietly, once.
# apt-get waits for the dpkg lock when another install holds it.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
if ! apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends chromium >"$log" 2>&1; then
  apt-get -o DPkg::Lock::Timeout=300 update -qq >>"$log" 2>&1 || true
  apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends chromium >>"$log" 2>&1 || {
    cat "$log" >&2
    echo "installing chromium with apt-get failed" >&2
    exit 1
  }
fi
rm -f "$log"
