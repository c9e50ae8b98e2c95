#!/usr/bin/env bash
# gavel mcp, the MCP gateway, end to end: the official TypeScript MCP SDK as
# the agents' client, the reference filesystem and everything servers
# upstream (stdio and streamable HTTP), gateway processes of GAVEL_BIN in
# front of a real secured three-node cluster (`gavel dev`, started as
# tests/browser/cluster.mjs starts it); then the MCP conformance suite's
# server scenarios against a gateway (on the Node 22 binary npm installs,
# conformance.test.mjs). The npm registry is the only network it may use; a
# warm cache needs none.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --prefer-offline --loglevel=error
node --test --test-concurrency=1 --test-timeout=120000 conformance.test.mjs gateway.test.mjs
