"""A small, independent reference encoder for AMQP 0-9-1 used by the codec tests.

Everything here is written with :mod:`struct` straight from the protocol spec JSON
(read at import time), so that expected bytes never come from the code under test.
It is deliberately simple and slow:

* method payloads: class id, method id, then the arguments; consecutive ``bit``
  arguments are packed LSB-first into one octet, and a new octet is started after
  any non-bit argument (or after 8 bits);
* shortstr / longstr / field tables (only ``{}`` or tables whose values are ``str``,
  encoded as ``S`` long strings, in dict order);
* whole frames (method / header / body / heartbeat), content headers with basic
  properties, and a complete publish (method + header + body frames split by frame_max).
"""
from __future__ import annotations

import datetime
import json
from datetime import datetime as _datetime_type
from decimal import Decimal
import struct
from dataclasses import dataclass, field
from pathlib import Path

SPEC_PATH = Path(__file__).resolve().parent.parent / "codec" / "amqp-rabbitmq-0.9.1.json"
SPEC = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
DOMAINS = {name: typ for name, typ in SPEC["domains"]}

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"

PRIMITIVES = {"bit", "octet", "short", "long", "longlong", "timestamp", "shortstr", "longstr", "table"}

# unsigned ranges of the integer domains
INT_RANGES = {
    "octet": (0, 2**8 - 1),
    "short": (0, 2**16 - 1),
    "long": (0, 2**32 - 1),
    "longlong": (0, 2**64 - 1),
    "timestamp": (0, 2**64 - 1),
}
INT_FORMATS = {"octet": ">B", "short": ">H", "long": ">I", "longlong": ">Q", "timestamp": ">Q"}

# python attribute names that differ from "spec name with '-' -> '_'"
RENAMED = {("exchange.declare", "type"): "exchange_type", ("basic.qos", "global"): "global_"}


def resolve_type(arg: dict) -> str:
    """Primitive type of a spec argument (``type`` or ``domain`` -> domains list)."""
    typ = arg.get("type")
    if typ is None:
        typ = DOMAINS[arg["domain"]]
    seen = set()
    while typ not in PRIMITIVES:  # a domain defined in terms of another domain
        if typ in seen:
            raise ValueError(f"domain loop at {typ}")
        seen.add(typ)
        typ = DOMAINS[typ]
    return typ


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


@dataclass(frozen=True)
class ArgSpec:
    name: str  # spec name, e.g. "routing-key"
    py_name: str  # python attribute name, e.g. "routing_key"
    type: str  # primitive type
    has_default: bool
    default: object

    def error_names(self, method_name: str) -> set:
        """Strings an error message about this field may use, e.g.
        "basic.publish.routing_key" (also accepts the raw spec spelling)."""
        return {
            f"{method_name}.{self.py_name}",
            f"{method_name}.{self.name}",
            f"{method_name}.{self.name.replace('-', '_')}",
        }


@dataclass(frozen=True)
class MethodSpec:
    class_name: str
    method_name: str
    class_id: int
    method_id: int
    synchronous: bool
    content: bool
    args: tuple = field(default_factory=tuple)

    @property
    def name(self) -> str:  # "basic.publish"
        return f"{self.class_name}.{self.method_name}"

    @property
    def index(self) -> int:
        return self.class_id << 16 | self.method_id

    @property
    def py_class(self) -> str:  # "BasicPublish"
        return camel(self.class_name) + camel(self.method_name)

    @property
    def fields(self) -> tuple:
        return tuple(a.py_name for a in self.args)

    def arg(self, py_name: str) -> ArgSpec:
        for a in self.args:
            if a.py_name == py_name:
                return a
        raise KeyError(py_name)

    def __str__(self) -> str:
        return self.name


def _load_methods() -> list:
    out = []
    for cls in SPEC["classes"]:
        for m in cls["methods"]:
            mname = f"{cls['name']}.{m['name']}"
            args = []
            for a in m["arguments"]:
                py = RENAMED.get((mname, a["name"]), a["name"].replace("-", "_"))
                args.append(
                    ArgSpec(
                        name=a["name"],
                        py_name=py,
                        type=resolve_type(a),
                        has_default="default-value" in a,
                        default=a.get("default-value"),
                    )
                )
            out.append(
                MethodSpec(
                    class_name=cls["name"],
                    method_name=m["name"],
                    class_id=cls["id"],
                    method_id=m["id"],
                    synchronous=bool(m.get("synchronous", False)),
                    content=bool(m.get("content", False)),
                    args=tuple(args),
                )
            )
    return out


METHOD_SPECS = _load_methods()
BY_NAME = {m.name: m for m in METHOD_SPECS}
BY_INDEX = {m.index: m for m in METHOD_SPECS}

BASIC_CLASS_ID = next(c["id"] for c in SPEC["classes"] if c["name"] == "basic")
BASIC_PROPERTIES = [
    (p["name"].replace("-", "_"), resolve_type(p))
    for c in SPEC["classes"]
    if c["name"] == "basic"
    for p in c["properties"]
]


# ---------------------------------------------------------------------------
# primitive encoders


def shortstr(value) -> bytes:
    raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if len(raw) > 255:
        raise ValueError("shortstr too long")
    return struct.pack(">B", len(raw)) + raw


def longstr(value) -> bytes:
    raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return struct.pack(">I", len(raw)) + raw


def table(value) -> bytes:
    """Field table: only {} or {str: str} (values as 'S' long strings), in dict order."""
    if value is None:
        value = {}
    body = b""
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError("reference table supports only str keys and str values")
        body += shortstr(key) + b"S" + longstr(item)
    return struct.pack(">I", len(body)) + body


def integer(typ: str, value: int) -> bytes:
    return struct.pack(INT_FORMATS[typ], value)


def timestamp(value) -> bytes:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        value = int(value.timestamp())
    return struct.pack(">Q", value)


def encode_value(typ: str, value) -> bytes:
    if typ == "shortstr":
        return shortstr(value)
    if typ == "longstr":
        return longstr(value)
    if typ == "table":
        return table(value)
    if typ == "timestamp":
        return timestamp(value)
    if typ in INT_FORMATS:
        return integer(typ, value)
    raise ValueError(typ)


# ---------------------------------------------------------------------------
# methods


def encode_arguments_with_spans(spec: MethodSpec, values: dict):
    """Encode the arguments; also return [(start, end, [ArgSpec...])] byte spans of the
    payload (offsets include the 4-byte class/method id prefix).  A packed bit octet
    is one span naming all the bits that share it."""
    out = bytearray()
    spans = []
    bit_octet = None  # (position in out, bit count, [args])
    for arg in spec.args:
        value = values[arg.py_name]
        if arg.type == "bit":
            if bit_octet is None or bit_octet[1] == 8:
                out.append(0)
                bit_octet = [len(out) - 1, 0, []]
                spans.append((4 + bit_octet[0], 4 + bit_octet[0] + 1, bit_octet[2]))
            if value:
                out[bit_octet[0]] |= 1 << bit_octet[1]
            bit_octet[1] += 1
            bit_octet[2].append(arg)
            continue
        bit_octet = None
        start = len(out)
        out += encode_value(arg.type, value)
        spans.append((4 + start, 4 + len(out), [arg]))
    return bytes(out), spans


def encode_arguments(spec: MethodSpec, values: dict) -> bytes:
    return encode_arguments_with_spans(spec, values)[0]


def method_payload(spec: MethodSpec, values: dict) -> bytes:
    return struct.pack(">HH", spec.class_id, spec.method_id) + encode_arguments(spec, values)


def field_at(spec: MethodSpec, values: dict, offset: int) -> list:
    """The argument(s) whose encoding covers payload byte ``offset``."""
    _, spans = encode_arguments_with_spans(spec, values)
    for start, end, args in spans:
        if start <= offset < end:
            return list(args)
    raise IndexError(offset)


def defaults(spec: MethodSpec) -> dict:
    """Default values of the spec (longstr as bytes, table {} )."""
    out = {}
    for arg in spec.args:
        if not arg.has_default:
            continue
        value = arg.default
        if arg.type == "longstr" and isinstance(value, str):
            value = value.encode("utf-8")
        if arg.type == "table" and value is None:
            value = {}
        out[arg.py_name] = value
    return out


# ---------------------------------------------------------------------------
# frames


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + bytes(payload) + bytes([FRAME_END])


def method_frame(spec: MethodSpec, values: dict, channel: int = 0) -> bytes:
    return frame(FRAME_METHOD, channel, method_payload(spec, values))


def properties(**props) -> bytes:
    """Basic properties: 16-bit flag word (bit 15 = first property) + present values."""
    flags = 0
    body = b""
    for i, (name, typ) in enumerate(BASIC_PROPERTIES):
        value = props.pop(name, None)
        if value is None:
            continue
        flags |= 1 << (15 - i)
        body += encode_value(typ, value)
    if props:
        raise TypeError(f"unknown properties {sorted(props)}")
    return struct.pack(">H", flags) + body


def header_frame(channel: int, body_size: int, props: bytes = b"\x00\x00", class_id: int = BASIC_CLASS_ID) -> bytes:
    return frame(FRAME_HEADER, channel, struct.pack(">HHQ", class_id, 0, body_size) + props)


def body_frames(channel: int, body: bytes, frame_max: int = 131072) -> bytes:
    if not body:
        return b""
    chunk = frame_max - 8 if frame_max else len(body)
    return b"".join(frame(FRAME_BODY, channel, body[i : i + chunk]) for i in range(0, len(body), chunk))


def content(channel: int, spec: MethodSpec, values: dict, body: bytes, props: bytes = b"\x00\x00", frame_max: int = 131072) -> bytes:
    return (
        method_frame(spec, values, channel)
        + header_frame(channel, len(body), props)
        + body_frames(channel, body, frame_max)
    )


def publish(channel, exchange, routing_key, body, props: bytes = b"\x00\x00", mandatory=False, immediate=False, frame_max=131072) -> bytes:
    if isinstance(body, str):
        body = body.encode("utf-8")
    body = bytes(memoryview(body).cast("B")) if not isinstance(body, bytes) else body
    values = {"ticket": 0, "exchange": exchange, "routing_key": routing_key, "mandatory": mandatory, "immediate": immediate}
    return content(channel, BY_NAME["basic.publish"], values, body, props, frame_max)


def heartbeat() -> bytes:
    return frame(FRAME_HEARTBEAT, 0, b"")


# ---------------------------------------------------------------------------
# sample values

SMALL_TABLE = {"a-key": "value", "b": "\u00fc\u00df"}  # sorted keys (pamqp sorts), str values


def sample_values(spec: MethodSpec, table_value=None) -> dict:
    """Non-default values for every argument: ints at the max of their domain, bits
    alternating (True first), non-empty strings (shortstr with multi-byte UTF-8,
    longstr with non-UTF-8 bytes), tables as given (default SMALL_TABLE)."""
    if table_value is None:
        table_value = SMALL_TABLE
    out = {}
    bit = True
    for arg in spec.args:
        if arg.type == "bit":
            out[arg.py_name] = bit
            bit = not bit
        elif arg.type in INT_RANGES:
            out[arg.py_name] = INT_RANGES[arg.type][1]
        elif arg.type == "shortstr":
            out[arg.py_name] = f"{arg.py_name}-\u00e9\u2713"
        elif arg.type == "longstr":
            out[arg.py_name] = b"\x00\x01\xfe\xff" + arg.py_name.encode()
        elif arg.type == "table":
            out[arg.py_name] = dict(table_value)
        else:  # pragma: no cover
            raise ValueError(arg.type)
    return out


# values pamqp accepts (it validates some deprecated fields and name syntax)
PAMQP_FIXED = {
    "ticket": 0,
    "capabilities": "",
    "insist": False,
    "known_hosts": "",
    "out_of_band": "0",
    "channel_id": b"0",
    "cluster_id": "",
}


def pamqp_values(spec: MethodSpec) -> dict:
    """Non-default values that pamqp 4 also accepts: ASCII names matching pamqp's
    name regex, signed-range longlong, deprecated fields at their required values."""
    out = {}
    bit = True
    for arg in spec.args:
        if arg.py_name in PAMQP_FIXED:
            out[arg.py_name] = PAMQP_FIXED[arg.py_name]
            if arg.type == "bit":
                bit = not bit
            continue
        if arg.type == "bit":
            out[arg.py_name] = bit
            bit = not bit
        elif arg.type == "longlong":
            out[arg.py_name] = 2**63 - 1
        elif arg.type in INT_RANGES:
            out[arg.py_name] = INT_RANGES[arg.type][1]
        elif arg.type == "shortstr":
            out[arg.py_name] = f"{arg.py_name}.x-1"
        elif arg.type == "longstr":
            out[arg.py_name] = f"secret-{arg.py_name}".encode()
        elif arg.type == "table":
            out[arg.py_name] = {"k1": "v1", "k2": "v2"}
        else:  # pragma: no cover
            raise ValueError(arg.type)
    return out


# --- comparing decoded values -------------------------------------------------------

def canon(v):
    """A comparable form that keeps Python types apart (True vs 1, 1 vs 1.0, bytes vs str)
    and treats nan as equal to nan.  tuple -> list, bytearray/memoryview -> bytes and
    naive datetimes -> UTC, as the contract maps them."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, float):
        return ("float", v.hex())
    if isinstance(v, Decimal):
        return ("dec", v)
    if isinstance(v, str):
        return ("str", v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return ("bytes", bytes(v))
    if isinstance(v, _datetime_type):
        return ("dt", v if v.tzinfo is not None else v.replace(tzinfo=datetime.timezone.utc))
    if v is None:
        return ("none",)
    if isinstance(v, (list, tuple)):
        return ("list", [canon(x) for x in v])
    if isinstance(v, dict):
        return ("dict", {k: canon(x) for k, x in v.items()})
    raise AssertionError(f"unexpected decoded type {type(v)!r}")
