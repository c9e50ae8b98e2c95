"""Build hook: generates the gRPC stubs and the typed service classes.

It runs grpcio-tools' bundled protoc (no system protoc) over the gavel.v1
protos, from ../../proto in a checkout or from the proto/ copy an sdist
carries, and adds the generated modules to the wheel. Nothing generated is
committed: every build generates afresh from the protos it ships with.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Generates gavel/v1/*_pb2*.py(i) and gavel/_services.py into the wheel."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        sys.path.insert(0, str(root))
        try:
            import codegen
        finally:
            sys.path.pop(0)
        self._generated = Path(tempfile.mkdtemp(prefix="gavel-python-gen-"))
        out = self._generated
        generated = codegen.generate(codegen.find_proto_root(root), out)
        for path in generated:
            build_data["force_include"][str(path)] = str(Path("gavel") / path.relative_to(out / "gavel"))

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        # The wheel holds copies now; the generated tree was only a staging area.
        shutil.rmtree(self._generated, ignore_errors=True)
