"""Write ``methods.pyx`` and ``methods.pyi`` from the protocol spec.

    python codec/codegen.py            # rewrite the generated files
    python codec/codegen.py --check    # exit 1 if they differ from what would be written

The output is committed; ``tests/test_codegen.py`` fails when it drifts from this script.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPEC = HERE / "amqp-rabbitmq-0.9.1.json"
PYX = HERE / "methods.pyx"
PYI = HERE / "methods.pyi"
INIT = HERE / "__init__.py"

# Python names where the spec's name is a keyword or too vague.
RENAMES = {("exchange", "declare", "type"): "exchange_type", ("basic", "qos", "global"): "global_"}
# Synchronous requests whose reply is not simply "<name>-ok".
RESPONSES = {("basic", "get"): ("get-ok", "get-empty")}

C_TYPES = {"octet": "uint8_t", "short": "uint16_t", "long": "uint32_t", "longlong": "uint64_t",
           "timestamp": "uint64_t", "bit": "bint", "shortstr": "str", "longstr": "bytes",
           "table": "dict"}
PY_TYPES = {"octet": "int", "short": "int", "long": "int", "longlong": "int", "timestamp": "int",
            "bit": "bool", "shortstr": "str", "longstr": "bytes", "table": "dict[str, Any]"}
PY_IN_TYPES = dict(PY_TYPES, longstr="bytes | str", table="dict[str, Any] | None")
INT_MAX = {"octet": "0xFF", "short": "0xFFFF", "long": "0xFFFFFFFF",
           "longlong": "0xFFFFFFFFFFFFFFFF", "timestamp": "0xFFFFFFFFFFFFFFFF"}
INT_BITS = {"octet": 8, "short": 16, "long": 32, "longlong": 64, "timestamp": 64}


def wrapped(head: str, items: list[str], tail: str, sep: str = ", ", width: int = 100) -> str:
    """``head + sep.join(items) + tail``, continued under the opening bracket when it would
    be wider than ``width`` (the generated code passes the line-length lint)."""
    line = head + sep.join(items) + tail
    if len(line) <= width:
        return line
    indent = " " * len(head)
    lines, current = [], head
    for i, item in enumerate(items):
        piece = item + (sep.rstrip() if i < len(items) - 1 else tail)
        if current.strip() and len(current) + len(piece) > width and current != head:
            lines.append(current.rstrip())
            current = indent
        current += piece + (" " if i < len(items) - 1 else "")
    lines.append(current.rstrip())
    return "\n".join(lines)


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


class Arg:
    def __init__(self, cls: str, meth: str, raw: dict, domains: dict[str, str]):
        self.spec_name = raw["name"]
        self.name = RENAMES.get((cls, meth, raw["name"]), raw["name"].replace("-", "_"))
        self.type = raw.get("type") or domains[raw["domain"]]
        self.has_default = "default-value" in raw
        self.default = raw.get("default-value")
        self.what = f"{cls}.{meth}.{self.name}"

    @property
    def required(self) -> bool:
        """No default in the spec: the caller must give it (the runtime raises TypeError)."""
        return not self.has_default

    def default_literal(self) -> str:
        if self.required:
            return "_REQUIRED"
        if self.type == "table":
            return "None"
        if self.type == "longstr":
            return repr(str(self.default).encode())
        return repr(self.default)



class Meth:
    def __init__(self, cls: dict, raw: dict, domains: dict[str, str]):
        self.cls = cls["name"]
        self.class_id = cls["id"]
        self.name = raw["name"]
        self.method_id = raw["id"]
        self.args = [Arg(self.cls, self.name, a, domains) for a in raw["arguments"]]
        self.synchronous = bool(raw.get("synchronous", False))
        self.content = bool(raw.get("content", False))
        self.pyname = camel(self.cls) + camel(self.name)
        self.full = f"{self.cls}.{self.name}"
        self.index = self.class_id << 16 | self.method_id
        self.reader = f"_read_{self.cls}_{self.name.replace('-', '_')}"


def stub_signatures(m: Meth) -> list[str]:
    """The parameters of ``m.__init__`` as the stubs write them, from the same ``required``
    flags the runtime's ``_REQUIRED`` defaults come from.

    A required argument after one with a default (``exchange`` after ``ticket=0``) cannot be
    written as one Python signature, so such methods get two overloads: every argument up
    to the last required one given (positionally or by name), or the optional leading
    ones left out and the later required ones given by name.
    """
    def param(a: Arg, optional: bool) -> str:
        return f"{a.name}: {PY_IN_TYPES[a.type]}" + (" = ..." if optional else "")

    first_default = next((i for i, a in enumerate(m.args) if not a.required), len(m.args))
    late = [i for i, a in enumerate(m.args) if a.required and i > first_default]
    if not late:
        return ["".join(f", {param(a, not a.required)}" for a in m.args)]
    last_required = late[-1]
    positional = "".join(f", {param(a, i > last_required and not a.required)}"
                         for i, a in enumerate(m.args))
    keywords = "".join(
        (", *" if i == late[0] else "") + f", {param(a, not a.required)}"
        for i, a in enumerate(m.args))
    return [positional, keywords]


def exported_names(methods: list[Meth]) -> list[str]:
    return ["Method", "METHODS", "decode_method"] + [m.pyname for m in methods]


def load(spec_path: Path = SPEC) -> tuple[dict, list[Meth]]:
    spec = json.loads(spec_path.read_text())
    domains = {name: typ for name, typ in spec["domains"]}
    methods = [Meth(c, m, domains) for c in spec["classes"] for m in c["methods"]]
    return spec, methods


def bit_groups(args: list[Arg]):
    """Yield (arg, octet_index_within_group, bit) for bits, None-grouped by wire octet."""
    groups: list[list[Arg] | Arg] = []
    for a in args:
        if a.type == "bit":
            if groups and isinstance(groups[-1], list) and len(groups[-1]) < 8:
                groups[-1].append(a)
            else:
                groups.append([a])
        else:
            groups.append(a)
    return groups


def responses(m: Meth, by_name: dict[tuple[str, str], Meth]) -> list[int]:
    if not m.synchronous:
        return []
    names = RESPONSES.get((m.cls, m.name), (m.name + "-ok",))
    out = []
    for n in names:
        reply = by_name.get((m.cls, n))
        if reply is None:
            raise SystemExit(f"codegen: no reply {m.cls}.{n} for synchronous {m.full}")
        out.append(reply.index)
    return out


HEADER = '''\
# cython: language_level=3
# GENERATED by codec/codegen.py from amqp-rabbitmq-0.9.1.json -- do not edit by hand.
"""The 66 methods of AMQP 0-9-1 with RabbitMQ's extensions, one class each.

Arguments are read-only attributes; values are checked against their domain when an
object is built, so a method that exists can always be encoded.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

from amqwire.codec.buffer cimport (
    FRAME_METHOD, expect_end, read_longstr, read_shortstr, read_u8, read_u16, read_u32, read_u64,
    utf8_of, view_of_buffer,
)
from amqwire.codec.table cimport read_named_table, write_named_table

from amqwire.codec.errors import AMQPSyntaxError, UnsupportedValueError

include "method_base.pxi"
'''


def gen_pyx(methods: list[Meth]) -> str:
    by_name = {(m.cls, m.name): m for m in methods}
    out = [HEADER.rstrip("\n")]
    for m in methods:
        out.append(gen_class(m, responses(m, by_name)))
    out.append(gen_tables(methods))
    return "\n".join(out)


# Credentials: the reprs show them as <masked> (frames get logged).
SECRET_ARGS = {
    ("connection.start-ok", "response"),
    ("connection.secure-ok", "response"),
    ("connection.update-secret", "new_secret"),
}


def gen_class(m: Meth, replies: list[int]) -> str:
    L = []
    w = L.append
    kind = "carries content" if m.content else ("synchronous" if m.synchronous else "asynchronous")
    w(f"\n\ncdef class {m.pyname}(Method):")
    w(f'    """{m.full} ({m.class_id}.{m.method_id}), {kind}."""')
    w(f'    NAME = "{m.full}"')
    w(f"    CLASS_ID = {m.class_id}")
    w(f"    METHOD_ID = {m.method_id}")
    w(f"    INDEX = 0x{m.index:08X}")
    w(f"    SYNCHRONOUS = {m.synchronous}")
    w(f"    HAS_CONTENT = {m.content}")
    w(f"    FIELDS = ({''.join(repr(a.name) + ', ' for a in m.args)})")
    w(f"    RESPONSES = ({''.join(f'0x{r:08X}, ' for r in replies)})")
    if m.args:
        w("")
    for a in m.args:
        w(f"    cdef readonly {C_TYPES[a.type]} {a.name}")
    w("")
    w(wrapped("    def __init__(", ["self"] + [f"{a.name}={a.default_literal()}" for a in m.args], "):"))
    if not m.args:
        w("        pass")
    for a in m.args:
        if a.type in INT_MAX:
            check = f"_uint({a.name}, {INT_MAX[a.type]}, {a.what!r})"
        else:
            check = {"bit": "_bit", "shortstr": "_shortstr", "longstr": "_longstr",
                     "table": "_table"}[a.type] + f"({a.name}, {a.what!r})"
        w(f"        self.{a.name} = {check}")
    w("")
    w("    cdef int write_payload(self, WriteBuffer buf) except -1:")
    w(f"        buf.write_u32(0x{m.index:08X})")
    for g in bit_groups(m.args):
        if isinstance(g, list):
            w(wrapped("        buf.write_u8(", [f"({1 << i} if self.{a.name} else 0)" for i, a in enumerate(g)],
                      ")", sep=" | "))
        elif g.type in INT_BITS:
            w(f"        buf.write_u{INT_BITS[g.type]}(self.{g.name})")
        elif g.type == "shortstr":
            w(f'        buf.write_shortstr(self.{g.name}, b"{g.what}")')
        elif g.type == "longstr":
            w(f'        buf.write_longstr(self.{g.name}, b"{g.what}")')
        elif g.type == "table":
            w(f'        write_named_table(buf, self.{g.name}, b"{g.what}")')
    w("        return 0")
    w("")
    w("    def _values(self):")
    w(wrapped("        return (", [f"self.{a.name}" for a in m.args], ",)" if len(m.args) == 1 else ")")
      if m.args else "        return ()")
    secret = [a.name for a in m.args if (m.full, a.name) in SECRET_ARGS]
    if secret:
        w("")
        w("    def __repr__(self):")
        w(f"        return _repr_masking(self, {tuple(secret)!r})")
    # reader
    w("")
    w("")
    w(f"cdef Method {m.reader}(ReadView *v):")
    w(f"    cdef {m.pyname} m = {m.pyname}.__new__({m.pyname})")
    if any(a.type == "bit" for a in m.args):
        w("    cdef uint8_t bits = 0")
    for g in bit_groups(m.args):
        if isinstance(g, list):
            w(f'    read_u8(v, &bits, b"{g[0].what}")')
            for i, a in enumerate(g):
                w(f"    m.{a.name} = (bits & {1 << i}) != 0")
        elif g.type in INT_BITS:
            w(f'    read_u{INT_BITS[g.type]}(v, &m.{g.name}, b"{g.what}")')
        elif g.type == "shortstr":
            w(f'    m.{g.name} = read_shortstr(v, b"{g.what}")')
        elif g.type == "longstr":
            w(f'    m.{g.name} = read_longstr(v, b"{g.what}")')
        elif g.type == "table":
            w(f'    m.{g.name} = read_named_table(v, b"{g.what}")')
    w("    return m")
    return "\n".join(L)


def gen_tables(methods: list[Meth]) -> str:
    class_ids = sorted({m.class_id for m in methods})
    max_mid = max(m.method_id for m in methods)
    L = ["", "", "# --- dispatch: class id -> slot, then [slot][method id] -> reader ---", ""]
    w = L.append
    w("cdef enum:")
    w(f"    _N_CLASSES = {len(class_ids)}")
    w(f"    _MAX_METHOD_ID = {max_mid}")
    w("")
    w("ctypedef Method (*_method_reader)(ReadView *v)")
    w("cdef signed char _CLASS_SLOT[256]")
    w("cdef _method_reader _READERS[_N_CLASSES][_MAX_METHOD_ID + 1]")
    w("")
    w("cdef void _init_dispatch() noexcept:")
    w("    cdef int i, j")
    w("    for i in range(256):")
    w("        _CLASS_SLOT[i] = -1")
    w("    for i in range(_N_CLASSES):")
    w("        for j in range(_MAX_METHOD_ID + 1):")
    w("            _READERS[i][j] = NULL")
    for slot, cid in enumerate(class_ids):
        w(f"    _CLASS_SLOT[{cid}] = {slot}")
    for m in methods:
        w(f"    _READERS[{class_ids.index(m.class_id)}][{m.method_id}] = {m.reader}")
    w("")
    w("_init_dispatch()")
    w("")
    w("")
    w("cdef bint method_has_content(uint32_t index) noexcept:")
    content = [m for m in methods if m.content]
    w("    return " + " or ".join(f"index == 0x{m.index:08X}" for m in content))
    w("")
    w("")
    # basic.ack and basic.nack read without a Python attribute (the client's hot path of
    # publisher confirms; methods.pxd declares it)
    w("cdef int confirm_of(Method method, uint64_t *delivery_tag, bint *multiple) noexcept:")
    w('    """1 for basic.ack, 2 for basic.nack (their delivery tag and multiple flag set), 0 else."""')
    w("    if type(method) is BasicAck:")
    w("        delivery_tag[0] = (<BasicAck>method).delivery_tag")
    w("        multiple[0] = (<BasicAck>method).multiple")
    w("        return 1")
    w("    if type(method) is BasicNack:")
    w("        delivery_tag[0] = (<BasicNack>method).delivery_tag")
    w("        multiple[0] = (<BasicNack>method).multiple")
    w("        return 2")
    w("    return 0")
    w("")
    w("")
    w("METHODS = {")
    for m in methods:
        w(f"    0x{m.index:08X}: {m.pyname},")
    w("}")
    w("")
    w(wrapped("__all__ = [", [repr(name) for name in exported_names(methods)], "]"))
    w("")
    return "\n".join(L)


def gen_pyi(methods: list[Meth]) -> str:
    L = ["# GENERATED by codec/codegen.py -- do not edit by hand.",
         "from typing import Any, ClassVar, overload", "",
         "__all__ = [", *(f'    "{name}",' for name in exported_names(methods)), "]", "",
         "class Method:",
         "    NAME: ClassVar[str]", "    CLASS_ID: ClassVar[int]", "    METHOD_ID: ClassVar[int]",
         "    INDEX: ClassVar[int]", "    SYNCHRONOUS: ClassVar[bool]", "    HAS_CONTENT: ClassVar[bool]",
         "    FIELDS: ClassVar[tuple[str, ...]]", "    RESPONSES: ClassVar[tuple[int, ...]]",
         "    def encode(self, channel: int = ..., frame_max: int = ...) -> bytes: ...",
         "    def encode_payload(self) -> bytes: ...",
         "    def __eq__(self, other: object, /) -> bool: ...", "",
         "METHODS: dict[int, type[Method]]",
         "def decode_method(payload: bytes | bytearray | memoryview) -> Method: ...", ""]
    w = L.append
    for m in methods:
        w(f"class {m.pyname}(Method):")
        for a in m.args:
            w("    @property")
            w(f"    def {a.name}(self) -> {PY_TYPES[a.type]}: ...")
        signatures = stub_signatures(m)
        for params in signatures:
            if len(signatures) > 1:
                w("    @overload")
            w(f"    def __init__(self{params}) -> None: ...")
        w("")
    return "\n".join(L)


INIT_BEGIN = "# BEGIN GENERATED by codec/codegen.py"
INIT_END = "# END GENERATED"


def gen_init(text: str, methods: list[Meth]) -> str:
    """``codec/__init__.py`` with its two generated blocks filled in: the method classes
    imported by name, and the literal ``__all__`` additions (mypy and stubtest read only
    literal ``__all__`` updates; a star import hides the names from linters)."""
    names = exported_names(methods)
    blocks = {
        "imports": "from amqwire.codec.methods import (\n" + "".join(f"    {n},\n" for n in names) + ")\n",
        "__all__": "__all__ += [\n" + "".join(f'    "{n}",\n' for n in names) + "]\n",
    }
    out = []
    rest = text
    while INIT_BEGIN in rest:
        head, _, rest = rest.partition(INIT_BEGIN)
        first_line, _, rest = rest.partition("\n")
        _, found_end, rest = rest.partition(INIT_END)
        tag = first_line.split(":", 1)[-1].strip().split()[0] if ":" in first_line else ""
        if not found_end or tag not in blocks:
            raise SystemExit(f"codegen: {INIT}: bad generated block {first_line!r}")
        out.append(f"{head}{INIT_BEGIN}{first_line}\n{blocks.pop(tag)}{INIT_END}")
    if blocks:
        raise SystemExit(f"codegen: {INIT} lacks the generated block(s) {sorted(blocks)}")
    return "".join(out) + rest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed output drifted")
    args = parser.parse_args(argv)
    _, methods = load()
    outputs = {PYX: gen_pyx(methods), PYI: gen_pyi(methods), INIT: gen_init(INIT.read_text(), methods)}
    if args.check:
        stale = [p.name for p, text in outputs.items() if not p.exists() or p.read_text() != text]
        if stale:
            print(f"codegen: out of date: {', '.join(stale)}; run python codec/codegen.py", file=sys.stderr)
            return 1
        return 0
    for path, text in outputs.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
