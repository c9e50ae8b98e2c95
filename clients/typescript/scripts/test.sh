#!/usr/bin/env bash
# The TypeScript suite: install from the lockfile (the npm registry is the
# only network it may use, and a warm cache needs none), build (ES modules
# and CommonJS) and type-check every package and the example in strict mode,
# then run the tests with node's test runner. The tests start real clusters
# with the gavel binary at GAVEL_BIN (default: target/debug/gavel of this
# workspace); package.test.ts also runs `npm pack` and `npm install
# --prefer-offline` into a temporary app outside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."

npm ci --no-audit --no-fund --prefer-offline --loglevel=error
npm run --silent typecheck
npx tsc -p test
node --test --test-concurrency=1 --test-timeout=300000 test/dist/*.test.js
