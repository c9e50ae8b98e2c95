"""Generates the Python stubs of gavel.v1 and the typed service classes.

Used by the build hook (hatch_build.py) and by nothing at run time. The
messages come from grpcio-tools' protoc (``--python_out``, ``--pyi_out``);
the service classes (gavel/_services.py) are written
from the same descriptors, one sync and one asyncio class per service, so
every RPC has a typed method without a hand-written list that could drift
from proto/.
"""

from __future__ import annotations

import re
from pathlib import Path

# The request field that lengthens a long-poll's deadline, as the Rust and
# TypeScript SDKs do (crates/gavel-client/src/client.rs).
LONG_POLL_FIELDS = {
    "gavel.v1.WorkerService.Poll": "wait_ms",
    "gavel.v1.ExecutionService.WaitExecution": "timeout_ms",
    "gavel.v1.ApprovalService.WaitApproval": "wait_ms",
    "gavel.v1.ExecutionService.ResumeAndWait": "wait_ms",
    "gavel.v1.WorkerService.ReportAndPoll": "wait_ms",
}

# The accessor each service gets on a client (client.approvals, ...).
ACCESSORS = {
    "CapabilityService": "capabilities",
    "ApprovalService": "approvals",
    "ExecutionService": "executions",
    "WorkerService": "workers",
    "AuditService": "audit",
    "ClusterService": "cluster",
    "AccessService": "access",
    "PolicyService": "policies",
}


def find_proto_root(package_root: Path) -> Path:
    """The directory holding gavel/v1/*.proto: an sdist's copy, else the repository's."""
    package_root = package_root.resolve()
    for candidate in (package_root / "proto", package_root.parent.parent / "proto"):
        if (candidate / "gavel" / "v1").is_dir():
            return candidate
    raise RuntimeError(f"no gavel/v1 protos next to {package_root} (looked in ./proto and ../../proto)")


def snake(name: str) -> str:
    """CreateApproval -> create_approval."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


# FieldDescriptorProto's type numbers, and the Python type of each scalar.
_TYPE_MESSAGE = 11
_TYPE_ENUM = 14
_LABEL_REPEATED = 3
_SCALARS = {1: "float", 2: "int", 3: "int", 4: "int", 5: "int", 6: "int", 7: "int", 8: "bool", 9: "str", 12: "bytes"}
_SCALARS.update({13: "int", 15: "int", 16: "int", 17: "int", 18: "int"})


def _types_of(files: object, modules: dict[str, str]) -> tuple[dict[str, str], dict[str, object]]:
    """Every gavel.v1 message and enum, nested ones included: full name -> Python expression, and
    full message name -> its descriptor (to tell a map's entry from a message)."""
    names: dict[str, str] = {}
    messages: dict[str, object] = {}

    def walk(message: object, prefix: str, expression: str) -> None:
        full = f"{prefix}.{message.name}"  # type: ignore[attr-defined]
        names[full] = f"{expression}.{message.name}"  # type: ignore[attr-defined]
        messages[full] = message
        for enum in message.enum_type:  # type: ignore[attr-defined]
            names[f"{full}.{enum.name}"] = f"{names[full]}.{enum.name}"
        for nested in message.nested_type:  # type: ignore[attr-defined]
            walk(nested, full, names[full])

    for file in files.file:  # type: ignore[attr-defined]
        if file.package != "gavel.v1":
            continue
        for enum in file.enum_type:
            names[f".gavel.v1.{enum.name}"] = f"{modules[file.name]}.{enum.name}"
        for message in file.message_type:
            walk(message, ".gavel.v1", modules[file.name])
    return names, messages


def _value_type(field: object, names: dict[str, str]) -> str:
    """The type a keyword of one (not repeated) value of `field` takes, as the protoc stubs' constructors do."""
    kind = field.type  # type: ignore[attr-defined]
    if kind == _TYPE_MESSAGE:
        return f"{names[field.type_name]} | Mapping[str, Any]"  # type: ignore[attr-defined]
    if kind == _TYPE_ENUM:
        return f"{names[field.type_name]} | str"  # type: ignore[attr-defined]
    return _SCALARS[kind]


def _keyword_type(field: object, names: dict[str, str], messages: dict[str, object]) -> str:
    """The annotation of the keyword for `field` of a request: its value, a list, or a map."""
    if field.label != _LABEL_REPEATED:  # type: ignore[attr-defined]
        return _value_type(field, names)
    entry = messages.get(field.type_name) if field.type == _TYPE_MESSAGE else None  # type: ignore[attr-defined]
    if entry is not None and entry.options.map_entry:  # type: ignore[attr-defined]
        key, value = entry.field  # type: ignore[attr-defined]
        return f"Mapping[{_value_type(key, names)}, {_value_type(value, names)}]"
    return f"Iterable[{_value_type(field, names)}]"


def _signature(request: str, input_message: object, names: dict[str, str], messages: dict[str, object]) -> str:
    """A method's parameters: the request message, or its fields as keywords, each typed, so that
    `mypy --strict` refuses a misspelt field name or a value of the wrong type."""
    keywords = "".join(
        f", {field.name}: {_keyword_type(field, names, messages)} | None = None"
        for field in input_message.field  # type: ignore[attr-defined]
    )
    return f"self, request: {request} | None = None, /, *, timeout: float | None = None{keywords}"


def _given(input_message: object) -> str:
    """The expression collecting a method's keywords that were given (not None)."""
    pairs = ", ".join(f'"{field.name}": {field.name}' for field in input_message.field)  # type: ignore[attr-defined]
    return f"_given({{{pairs}}})"


def generate(proto_root: Path, out: Path) -> list[Path]:
    """Writes every generated module under out/gavel and returns their paths."""
    import grpc_tools
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    protos = sorted(str(path.relative_to(proto_root)) for path in (proto_root / "gavel" / "v1").glob("*.proto"))
    include = Path(grpc_tools.__file__).parent / "_proto"
    descriptor_set = out / "descriptors.pb"
    out.mkdir(parents=True, exist_ok=True)
    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{proto_root}",
            f"-I{include}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--descriptor_set_out={descriptor_set}",
            "--include_source_info",
            *protos,
        ]
    )
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status} on {proto_root}")
    (out / "gavel" / "v1" / "__init__.py").write_text('"""Generated gavel.v1 messages and stubs."""\n')
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes())
    (out / "gavel" / "_services.py").write_text(services_module(files))
    return sorted(path for path in (out / "gavel").rglob("*") if path.is_file())


def _comments(file: object) -> dict[tuple[int, ...], str]:
    comments: dict[tuple[int, ...], str] = {}
    for location in file.source_code_info.location:  # type: ignore[attr-defined]
        text = location.leading_comments.strip()
        if text:
            comments[tuple(location.path)] = " ".join(line.strip() for line in text.splitlines())
    return comments


def _docstring(text: str, indent: str) -> str:
    text = text.replace("\\", "\\\\").replace('"""', "'''")
    return f'{indent}"""{text}"""\n'


def services_module(files: object) -> str:
    """The source of gavel/_services.py for the services in `files`."""
    lines = [
        '"""Typed service classes, generated from proto/gavel/v1 at build time. Do not edit."""\n',
        "\n",
        "from __future__ import annotations\n",
        "\n",
        "from collections.abc import AsyncIterator, Iterable, Iterator, Mapping\n",
        "from typing import Any\n",
        "\n",
        "from gavel._invoke import AsyncInvoker, Invoker, MethodSpec\n",
    ]
    modules: dict[str, str] = {}
    for file in files.file:  # type: ignore[attr-defined]
        if file.package == "gavel.v1":
            module = Path(file.name).stem + "_pb2"
            modules[file.name] = module
            lines.append(f"from gavel.v1 import {module}\n")
    message_module: dict[str, str] = {}
    for file in files.file:  # type: ignore[attr-defined]
        if file.package == "gavel.v1":
            for message in file.message_type:
                message_module[f".gavel.v1.{message.name}"] = f"{modules[file.name]}.{message.name}"
    names, all_messages = _types_of(files, modules)
    body: list[str] = [
        "\n\ndef _given(fields: dict[str, Any]) -> dict[str, Any]:\n"
        '    """The keywords a call was given: a field left at None is not set."""\n'
        "    return {name: value for name, value in fields.items() if value is not None}\n"
    ]
    accessors: list[tuple[str, str]] = []
    for file in files.file:  # type: ignore[attr-defined]
        if file.package != "gavel.v1":
            continue
        comments = _comments(file)
        messages = {f".gavel.v1.{m.name}": m for m in file.message_type}
        for service_index, service in enumerate(file.service):
            accessors.append((ACCESSORS.get(service.name, snake(service.name)), service.name))
            specs: list[str] = []
            sync_methods: list[str] = []
            async_methods: list[str] = []
            for method_index, method in enumerate(service.method):
                full = f"gavel.v1.{service.name}.{method.name}"
                request = message_module[method.input_type]
                response = message_module[method.output_type]
                input_message = messages.get(method.input_type)
                if input_message is None:
                    input_message = next(
                        m
                        for f in files.file
                        for m in f.message_type
                        if f".{f.package}.{m.name}" == method.input_type  # type: ignore[attr-defined]
                    )
                mutating = any(field.name == "request_id" for field in input_message.field)
                long_poll = LONG_POLL_FIELDS.get(full)
                constant = f"_{service.name.upper()}_{snake(method.name).upper()}"
                specs.append(
                    f"{constant} = MethodSpec(\n"
                    f'    path="/gavel.v1.{service.name}/{method.name}",\n'
                    f"    request_type={request},\n"
                    f"    response_type={response},\n"
                    f"    mutating={mutating},\n"
                    f"    long_poll_field={long_poll!r},\n"
                    f"    streaming={method.server_streaming},\n"
                    ")\n"
                )
                doc = comments.get((6, service_index, 2, method_index), f"Calls {method.name}.")
                name = snake(method.name)
                signature = _signature(request, input_message, names, all_messages)
                given = _given(input_message)
                if method.server_streaming:
                    sync_methods.append(
                        f"    def {name}({signature}) -> Iterator[{response}]:\n"
                        + _docstring(doc, "        ")
                        + f"        return self._invoker.stream({constant}, request, {given}, timeout)\n"
                    )
                    async_methods.append(
                        f"    def {name}({signature}) -> AsyncIterator[{response}]:\n"
                        + _docstring(doc, "        ")
                        + f"        return self._invoker.stream({constant}, request, {given}, timeout)\n"
                    )
                else:
                    sync_methods.append(
                        f"    def {name}({signature}) -> {response}:\n"
                        + _docstring(doc, "        ")
                        + f"        return self._invoker.unary({constant}, request, {given}, timeout)\n"
                    )
                    async_methods.append(
                        f"    async def {name}({signature}) -> {response}:\n"
                        + _docstring(doc, "        ")
                        + f"        return await self._invoker.unary({constant}, request, {given}, timeout)\n"
                    )
            service_doc = comments.get((6, service_index), f"The {service.name}.")
            body.append("\n\n" + "".join(specs))
            for prefix, invoker, methods in (("", "Invoker", sync_methods), ("Async", "AsyncInvoker", async_methods)):
                body.append(
                    f"\n\nclass {prefix}{service.name}:\n"
                    + _docstring(service_doc, "    ")
                    + "\n"
                    + f"    def __init__(self, invoker: {invoker}) -> None:\n"
                    + "        self._invoker = invoker\n"
                    + "".join("\n" + method for method in methods)
                )
    body.append("\n\n# (accessor, service class) pairs every client exposes.\n")
    body.append("SERVICES: list[tuple[str, str]] = [\n")
    for accessor, service in accessors:
        body.append(f'    ("{accessor}", "{service}"),\n')
    body.append("]\n")
    return "".join(lines) + "".join(body)
