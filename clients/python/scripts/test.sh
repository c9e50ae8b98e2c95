#!/usr/bin/env bash
# The Python suite: a venv under target/python/ (made once, and refreshed only
# when the pinned requirements change), the wheel built from clients/python
# (its build hook generates the gRPC code from proto/ with grpcio-tools), the
# wheel installed into that venv, then pytest against real secured
# three-node clusters of the gavel binary at GAVEL_BIN (default:
# target/debug/gavel of this workspace). The registry is the only network it
# uses, and only when the venv is new or its requirements changed.
set -euo pipefail
package="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$package/../.." && pwd)"
# The venv and its pinned requirements (a no-op once they are there).
venv="$("$package/scripts/venv.sh")"
target="$(dirname "$venv")"
dist="$target/dist"

# Lint and format check of the package, its tests and examples.
"$venv/bin/ruff" check --quiet "$package"
"$venv/bin/ruff" format --check --quiet "$package"

# Build the wheel (no build isolation: the venv has the build requirements,
# so a warm run needs no network) and install it; the tests import the
# installed package, never the source tree.
rm -rf "$dist"
"$venv/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps -w "$dist" "$package"
wheel="$(ls "$dist"/gavel_client-*.whl)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel"

# The public API is typed: mypy --strict over the installed package (run
# from outside the source tree, so it checks what the wheel installed).
(cd "$target" && "$venv/bin/mypy" --config-file "$package/pyproject.toml" --cache-dir "$target/mypy-cache" \
  --no-error-summary -p gavel)

export GAVEL_BIN="${GAVEL_BIN:-$root/target/debug/gavel}"
export GAVEL_PY_WHEEL="$wheel"
cd "$package"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
