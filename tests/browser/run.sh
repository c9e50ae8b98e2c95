#!/usr/bin/env bash
# The browser tests: Debian's chromium (installed with apt-get when missing),
# playwright-core and axe-core from the lockfile, against a real secured
# three-node cluster of GAVEL_BIN (`gavel dev`, with its console) and the
# refund-worker built next to it; oidc.test.mjs adds a real OpenID Provider
# (npm oidc-provider, in process on loopback) and a standalone gavel console.
# GAVEL_UPDATE_DOCS_IMG=1 copies the screenshots to docs/img.
set -euo pipefail
cd "$(dirname "$0")"
./install-chromium.sh
npm ci --no-audit --no-fund --prefer-offline --loglevel=error
node --test --test-concurrency=1 --test-timeout=120000 console.test.mjs oidc.test.mjs
if [ "${GAVEL_UPDATE_DOCS_IMG:-}" = 1 ]; then
  for name in inbox approval execution quorum; do
    cp "out/$name.png" "../../docs/img/console-$name.png"
  done
fi
