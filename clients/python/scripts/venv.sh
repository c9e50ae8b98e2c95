#!/usr/bin/env bash
# The Python suite's venv under target/python/venv: made once, and its pinned
# requirements installed again only when the list below changes. Called by
# test.sh, and by scripts/test beside the Rust build (the install is mostly
# downloading and unpacking), so that the Python stage finds it ready.
# Prints the venv's path (and nothing else on stdout).
set -euo pipefail
package="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$package/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}/python"
venv="$target/venv"
python="${PYTHON:-python3}"

# What the suite needs, pinned to the minors the issue names. Changing this
# list is what makes the next run reinstall.
requirements=(
  "grpcio==1.85.*" "grpcio-tools==1.85.*" "protobuf>=7.35.1,<8" "hatchling>=1.21"
  "pytest==9.*" "pytest-asyncio==1.*" "langgraph==1.2.*" "openai-agents==0.24.*" "ruff==0.*" "mypy==1.*"
)
stamp="$venv/.gavel-requirements"
wanted="$(printf '%s\n' "${requirements[@]}")"
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv" >&2
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$wanted" ]]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --prefer-binary "${requirements[@]}" >&2
  printf '%s\n' "$wanted" > "$stamp"
fi
echo "$venv"
