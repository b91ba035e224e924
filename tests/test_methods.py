"""Method classes of amqwire.codec: all 66 methods of the spec, checked against an
independent reference encoder (tests/amqp_reference.py), hand-written hex vectors and
pamqp (both directions)."""
import pickle
import struct
import warnings

import pytest

import amqwire.codec as codec
from amqwire.codec import AMQPSyntaxError, UnsupportedValueError

import amqp_reference as R

ALL = R.METHOD_SPECS
IDS = [m.name for m in ALL]
WITH_ARGS = [m for m in ALL if m.args]


def cls_of(spec):
    return getattr(codec, spec.py_class)


def build(spec, values):
    return cls_of(spec)(**values)


def message_names_field(exc, spec, args):
    text = str(exc)
    names = set()
    for a in args:
        names |= a.error_names(spec.name)
    return any(n in text for n in names), text, names


# ---------------------------------------------------------------------------
# the set of methods


def test_spec_has_66_methods():
    assert len(ALL) == 66


def test_methods_registry_is_complete():
    assert len(codec.METHODS) == 66
    assert set(codec.METHODS) == {m.index for m in ALL}
    for spec in ALL:
        cls = codec.METHODS[spec.index]
        assert cls is cls_of(spec), spec.name
        assert issubclass(cls, codec.Method)


@pytest.mark.parametrize(
    "name, index",
    [
        ("confirm.select", 0x0055000A),
        ("confirm.select-ok", 0x0055000B),
        ("basic.nack", 0x003C0078),
        ("exchange.bind", 0x0028001E),
        ("exchange.bind-ok", 0x0028001F),
        ("exchange.unbind", 0x00280028),
        ("exchange.unbind-ok", 0x00280033),
        ("connection.blocked", 0x000A003C),
        ("connection.unblocked", 0x000A003D),
        ("connection.update-secret", 0x000A0046),
        ("connection.update-secret-ok", 0x000A0047),
    ],
)
def test_rabbitmq_extensions_present(name, index):
    cls = codec.METHODS[index]
    assert cls.NAME == name
    assert cls.INDEX == index


def test_flat_class_names():
    assert codec.BasicRecoverAsync.NAME == "basic.recover-async"
    assert codec.ConnectionUpdateSecretOk.NAME == "connection.update-secret-ok"
    assert codec.ExchangeDeclare.FIELDS[2] == "exchange_type"
    assert codec.BasicQos.FIELDS == ("prefetch_size", "prefetch_count", "global_")


@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_class_attributes_match_spec(spec):
    cls = cls_of(spec)
    assert cls.NAME == spec.name
    assert cls.CLASS_ID == spec.class_id
    assert cls.METHOD_ID == spec.method_id
    assert cls.INDEX == spec.class_id << 16 | spec.method_id
    assert cls.SYNCHRONOUS is spec.synchronous
    assert cls.HAS_CONTENT is spec.content
    assert isinstance(cls.FIELDS, tuple)
    assert cls.FIELDS == spec.fields


# ---------------------------------------------------------------------------
# encoding against the reference


@pytest.mark.parametrize("table", ["small", "empty"])
@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_encode_matches_reference(spec, table):
    values = R.sample_values(spec, table_value=R.SMALL_TABLE if table == "small" else {})
    m = build(spec, values)
    payload = R.method_payload(spec, values)
    assert m.encode_payload() == payload
    assert m.encode(channel=5) == R.frame(R.FRAME_METHOD, 5, payload)
    assert m.encode() == R.frame(R.FRAME_METHOD, 0, payload)
    assert m.encode(65535) == R.frame(R.FRAME_METHOD, 65535, payload)
    for attr, value in values.items():
        assert getattr(m, attr) == value, attr


@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_defaults(spec):
    required = {a.py_name: v for a, v in zip(spec.args, R.sample_values(spec).values()) if not a.has_default}
    m = build(spec, required)
    expected = dict(required)
    expected.update(R.defaults(spec))
    for attr, value in expected.items():
        assert getattr(m, attr) == value, attr
    assert m.encode_payload() == R.method_payload(spec, expected)


@pytest.mark.parametrize("spec", [m for m in ALL if any(not a.has_default for a in m.args)], ids=lambda m: m.name)
def test_required_arguments(spec):
    values = R.sample_values(spec)
    for arg in spec.args:
        if arg.has_default:
            continue
        partial = {k: v for k, v in values.items() if k != arg.py_name}
        with pytest.raises(TypeError):
            build(spec, partial)


@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_decode_round_trip(spec):
    values = R.sample_values(spec)
    payload = R.method_payload(spec, values)
    for data in (payload, bytearray(payload), memoryview(payload), memoryview(b"xx" + payload)[2:]):
        m = codec.decode_method(data)
        assert type(m) is cls_of(spec)
        assert m == build(spec, values)
        for arg in spec.args:
            got = getattr(m, arg.py_name)
            assert got == values[arg.py_name], arg.py_name
            expected_type = {"bit": bool, "shortstr": str, "longstr": bytes, "table": dict}.get(arg.type, int)
            assert type(got) is expected_type, (arg.py_name, type(got))
        assert m.encode_payload() == payload


@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_decode_trailing_byte(spec):
    payload = R.method_payload(spec, R.sample_values(spec))
    with pytest.raises(AMQPSyntaxError):
        codec.decode_method(payload + b"\x00")


@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_decode_every_truncation(spec):
    values = R.sample_values(spec)
    payload = R.method_payload(spec, values)
    for cut in range(len(payload)):
        with pytest.raises(AMQPSyntaxError) as info:
            codec.decode_method(payload[:cut])
        if cut >= 4:
            args = R.field_at(spec, values, cut)
            ok, text, names = message_names_field(info.value, spec, args)
            assert ok, f"cut {cut}: {text!r} names none of {sorted(names)}"


@pytest.mark.parametrize(
    "index, text",
    [(0x003C00FF, "60.255"), (0x00FF000A, "255.10"), (0x00000000, "0.0"), (0x003C0000, "60.0"), (0xFFFFFFFF, "65535.65535")],
)
def test_decode_unknown_method(index, text):
    with pytest.raises(AMQPSyntaxError) as info:
        codec.decode_method(struct.pack(">I", index) + b"\x00" * 8)
    assert "unknown method" in str(info.value)
    assert text in str(info.value)


def test_decode_empty_payload():
    with pytest.raises(AMQPSyntaxError):
        codec.decode_method(b"")


# ---------------------------------------------------------------------------
# hand-written vectors (the bytes are written out literally)

VECTORS = [
    (
        "basic.publish",
        dict(exchange="amq.direct", routing_key="rk", mandatory=True),
        "003c 0028 0000 0a 616d712e646972656374 02 726b 01",
    ),
    (
        "basic.deliver",
        dict(consumer_tag="ctag", delivery_tag=1, redelivered=True, exchange="", routing_key="q"),
        "003c 003c 04 63746167 0000000000000001 01 00 01 71",
    ),
    (
        "queue.declare",
        dict(queue="q1", durable=True, auto_delete=True),
        "0032 000a 0000 02 7131 0a 00000000",
    ),
    (
        "queue.declare",
        dict(queue="q1", passive=True, exclusive=True, nowait=True, arguments={"x-queue-type": "quorum"}),
        "0032 000a 0000 02 7131 15 00000018 0c 782d71756575652d74797065 53 00000006 71756f72756d",
    ),
    (
        "connection.tune",
        dict(channel_max=2047, frame_max=131072, heartbeat=60),
        "000a 001e 07ff 00020000 003c",
    ),
    (
        "exchange.declare",
        dict(exchange="x", exchange_type="topic", passive=True, durable=True, auto_delete=True, internal=True, nowait=True),
        "0028 000a 0000 01 78 05 746f706963 1f 00000000",
    ),
    ("basic.nack", dict(delivery_tag=5, multiple=True, requeue=False), "003c 0078 0000000000000005 01"),
    ("basic.nack", dict(delivery_tag=5), "003c 0078 0000000000000005 02"),
    ("access.request", dict(), "001e 000a 05 2f64617461 1e"),
    ("basic.qos", dict(prefetch_count=10, global_=True), "003c 000a 00000000 000a 01"),
    ("confirm.select", dict(nowait=True), "0055 000a 01"),
    ("tx.commit", dict(), "005a 0014"),
    (
        "connection.start-ok",
        dict(client_properties={}, response=b"\x00guest\x00guest"),
        "000a 000b 00000000 05 504c41494e 0000000c 00 6775657374 00 6775657374 05 656e5f5553",
    ),
    (
        "basic.get-ok",
        dict(delivery_tag=2**64 - 1, exchange="e", routing_key="k", message_count=7),
        "003c 0047 ffffffffffffffff 00 01 65 01 6b 00000007",
    ),
]


@pytest.mark.parametrize("name, kwargs, hexstr", VECTORS, ids=[f"{v[0]}-{i}" for i, v in enumerate(VECTORS)])
def test_hex_vectors(name, kwargs, hexstr):
    payload = bytes.fromhex(hexstr.replace(" ", ""))
    spec = R.BY_NAME[name]
    values = R.defaults(spec)
    values.update(kwargs)
    assert R.method_payload(spec, values) == payload  # the reference agrees with the literal
    m = build(spec, kwargs)
    assert m.encode_payload() == payload
    assert m.encode(1) == b"\x01\x00\x01" + struct.pack(">I", len(payload)) + payload + b"\xce"
    assert codec.decode_method(payload) == m


def test_publish_frame_literal():
    frame = codec.BasicPublish(exchange="amq.direct", routing_key="rk", mandatory=True).encode(channel=1)
    assert frame == bytes.fromhex("01 0001 00000015 003c0028 0000 0a 616d712e646972656374 02 726b 01 ce".replace(" ", ""))


def test_heartbeat_and_header_constants():
    assert codec.PROTOCOL_HEADER == b"AMQP\x00\x00\x09\x01"
    assert codec.HEARTBEAT_FRAME == b"\x08\x00\x00\x00\x00\x00\x00\xce"
    assert (codec.FRAME_METHOD, codec.FRAME_HEADER, codec.FRAME_BODY, codec.FRAME_HEARTBEAT) == (1, 2, 3, 8)
    assert codec.FRAME_END == 0xCE
    assert codec.FRAME_MIN_SIZE == 4096
    assert codec.DEFAULT_FRAME_MAX == 131072
    assert codec.MAX_NESTING == 64


# ---------------------------------------------------------------------------
# validation on construction


@pytest.mark.parametrize("spec", [m for m in ALL if any(a.type in R.INT_RANGES for a in m.args)], ids=lambda m: m.name)
def test_int_range_errors(spec):
    values = R.sample_values(spec)
    for arg in spec.args:
        if arg.type not in R.INT_RANGES:
            continue
        lo, hi = R.INT_RANGES[arg.type]
        for bad in (hi + 1, lo - 1, 2**64, -(2**63) - 1):
            with pytest.raises(AMQPSyntaxError) as info:
                build(spec, {**values, arg.py_name: bad})
            assert not isinstance(info.value, UnsupportedValueError), (arg.py_name, bad)
            ok, text, names = message_names_field(info.value, spec, [arg])
            assert ok, f"{arg.py_name}={bad}: {text!r}"
        # the extremes themselves are fine
        for good in (lo, hi):
            m = build(spec, {**values, arg.py_name: good})
            assert getattr(m, arg.py_name) == good
            assert codec.decode_method(m.encode_payload()) == m


@pytest.mark.parametrize(
    "cls, kwargs, field",
    [
        ("BasicQos", dict(prefetch_count=65536), "basic.qos.prefetch_count"),
        ("BasicQos", dict(prefetch_size=2**32), "basic.qos.prefetch_size"),
        ("ConnectionStart", dict(version_major=-1, server_properties={}), "connection.start.version_major"),
        ("ConnectionStart", dict(version_minor=256, server_properties={}), "connection.start.version_minor"),
        ("BasicAck", dict(delivery_tag=2**64), "basic.ack.delivery_tag"),
        ("BasicAck", dict(delivery_tag=-1), "basic.ack.delivery_tag"),
        ("ConnectionTune", dict(frame_max=2**32), "connection.tune.frame_max"),
        ("ChannelClose", dict(reply_code=65536, class_id=0, method_id=0), "channel.close.reply_code"),
        ("BasicPublish", dict(routing_key="r" * 256), "basic.publish.routing_key"),
        ("BasicPublish", dict(exchange="\u00e9" * 128), "basic.publish.exchange"),
    ],
)
def test_named_range_errors(cls, kwargs, field):
    with pytest.raises(AMQPSyntaxError) as info:
        getattr(codec, cls)(**kwargs)
    assert field in str(info.value)


@pytest.mark.parametrize("spec", [m for m in ALL if any(a.type == "shortstr" for a in m.args)], ids=lambda m: m.name)
def test_shortstr_length_limit(spec):
    values = R.sample_values(spec)
    for arg in spec.args:
        if arg.type != "shortstr":
            continue
        for bad in ("x" * 256, "\u00e9" * 128, "\u2713" * 86):
            with pytest.raises(AMQPSyntaxError) as info:
                build(spec, {**values, arg.py_name: bad})
            ok, text, names = message_names_field(info.value, spec, [arg])
            assert ok, f"{arg.py_name}: {text!r}"
        for good in ("x" * 255, "\u00e9" * 127 + "x", "\u2713" * 85, ""):
            vals = {**values, arg.py_name: good}
            m = build(spec, vals)
            assert m.encode_payload() == R.method_payload(spec, vals)
            assert codec.decode_method(m.encode_payload()) == m


WRONG_TYPES = {
    "octet": ["1", 1.0, b"\x01"],
    "short": ["1", 1.0, b"\x01"],
    "long": ["1", 1.0],
    "longlong": ["1", 1.5],
    "shortstr": [5, 1.0, ["a"], {"a": "b"}],
    "longstr": [5, 1.0, ["a"]],
    "table": [[("a", "b")], "a=b", 5],
}


@pytest.mark.parametrize("spec", WITH_ARGS, ids=lambda m: m.name)
def test_wrong_types(spec):
    values = R.sample_values(spec)
    for arg in spec.args:
        for bad in WRONG_TYPES.get(arg.type, []):
            with pytest.raises(UnsupportedValueError):
                build(spec, {**values, arg.py_name: bad}).encode_payload()


@pytest.mark.parametrize("spec", [m for m in ALL if any(a.type in ("shortstr", "longstr") for a in m.args)], ids=lambda m: m.name)
def test_str_not_encodable_as_utf8(spec):
    # a lone surrogate has no UTF-8 encoding: an unencodable value, so AMQPSyntaxError
    # naming the field (at construction or at the latest when encoding), not UnicodeEncodeError
    values = R.sample_values(spec)
    for arg in spec.args:
        if arg.type not in ("shortstr", "longstr"):
            continue
        with pytest.raises(AMQPSyntaxError) as info:
            build(spec, {**values, arg.py_name: "ok\udc80"}).encode_payload()
        ok, text, names = message_names_field(info.value, spec, [arg])
        assert ok, f"{arg.py_name}: {text!r}"


def test_unencodable_table_value():
    with pytest.raises(UnsupportedValueError):
        codec.QueueDeclare(queue="q", arguments={"x": object()}).encode_payload()
    with pytest.raises(UnsupportedValueError):
        codec.QueueDeclare(queue="q", arguments={1: "x"}).encode_payload()


def test_table_none_is_empty():
    m = codec.QueueDeclare(queue="q", arguments=None)
    assert m.arguments == {}
    assert m == codec.QueueDeclare(queue="q")


def test_longstr_accepts_str():
    m = codec.ConnectionSecureOk(response="gr\u00fc\u00df")
    assert m.response == "gr\u00fc\u00df".encode("utf-8")
    assert m == codec.ConnectionSecureOk(response="gr\u00fc\u00df".encode("utf-8"))


def test_rich_table_argument_round_trip():
    args = {"x-max-length": 10, "x-message-ttl": 2**40, "flag": True, "nested": {"a": [1, "b", None]}, "s": "str"}
    m = codec.QueueDeclare(queue="q", arguments=args)
    d = codec.decode_method(m.encode_payload())
    assert d.arguments == args
    assert d == m


# ---------------------------------------------------------------------------
# object behaviour


@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_equality_repr_pickle(spec):
    values = R.sample_values(spec)
    a = build(spec, values)
    b = build(spec, dict(values))
    assert a == b and not (a != b)
    assert a != object() and not (a == "x")
    for arg in spec.args:  # any field difference makes them unequal
        other = dict(values)
        if arg.type == "bit":
            other[arg.py_name] = not values[arg.py_name]
        elif arg.type in R.INT_RANGES:
            other[arg.py_name] = values[arg.py_name] - 1
        elif arg.type == "shortstr":
            other[arg.py_name] = values[arg.py_name] + "2"
        elif arg.type == "longstr":
            other[arg.py_name] = values[arg.py_name] + b"2"
        else:
            other[arg.py_name] = {"other": "t"}
        assert build(spec, other) != a, arg.py_name
    text = repr(a)
    assert isinstance(text, str)
    assert spec.py_class in text or spec.name in text, text
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        c = pickle.loads(pickle.dumps(a, proto))
        assert type(c) is type(a)
        assert c == a
        assert c.encode_payload() == a.encode_payload()


def test_same_fields_different_class_not_equal():
    assert codec.TxSelect() != codec.TxCommit()
    assert codec.ConnectionTune(channel_max=1) != codec.ConnectionTuneOk(channel_max=1)
    assert codec.BasicRecover(requeue=True) != codec.BasicRecoverAsync(requeue=True)


def test_repr_shows_values():
    text = repr(codec.BasicPublish(exchange="ex-name", routing_key="the-routing-key"))
    assert "the-routing-key" in text and "ex-name" in text


@pytest.mark.parametrize("spec", WITH_ARGS, ids=lambda m: m.name)
def test_attributes_read_only(spec):
    values = R.sample_values(spec)
    m = build(spec, values)
    for arg in spec.args:
        with pytest.raises((AttributeError, TypeError)):
            setattr(m, arg.py_name, values[arg.py_name])
    assert m == build(spec, values)


# ---------------------------------------------------------------------------
# pamqp, both ways

from pamqp import commands as pamqp_commands  # noqa: E402
from pamqp import frame as pamqp_frame  # noqa: E402

PAMQP = [m for m in ALL if m.index in pamqp_commands.INDEX_MAPPING]


def test_pamqp_lacks_only_access_class():
    # pamqp 4 dropped the deprecated access class; everything else is cross-checked
    assert sorted(m.name for m in ALL if m not in PAMQP) == ["access.request", "access.request-ok"]


def pamqp_kwargs(values):
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in values.items()}


def pamqp_command(spec, values):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pamqp_commands.INDEX_MAPPING[spec.index](**pamqp_kwargs(values))


def normalise_pamqp(spec, obj):
    out = {}
    for arg in spec.args:
        v = getattr(obj, arg.py_name)
        if arg.type == "longstr" and isinstance(v, str):
            v = v.encode("utf-8")
        out[arg.py_name] = v
    return out


@pytest.mark.parametrize("spec", PAMQP, ids=lambda m: m.name)
def test_ours_decodes_with_pamqp(spec):
    values = R.pamqp_values(spec)
    data = build(spec, values).encode(channel=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # pamqp warns on basic.recover-async
        consumed, channel, obj = pamqp_frame.unmarshal(data)
    assert consumed == len(data)
    assert channel == 5
    assert obj.index == spec.index
    assert normalise_pamqp(spec, obj) == values


@pytest.mark.parametrize("spec", PAMQP, ids=lambda m: m.name)
def test_pamqp_decodes_with_ours(spec):
    values = R.pamqp_values(spec)
    data = pamqp_frame.marshal(pamqp_command(spec, values), 7)
    expected = build(spec, values)
    assert codec.decode_method(data[7:-1]) == expected
    frames = codec.FrameParser().feed(data)
    assert len(frames) == 1
    f = frames[0]
    assert isinstance(f, codec.MethodFrame)
    assert f.channel == 7
    assert f.method == expected
    assert f == codec.MethodFrame(7, expected)
    assert data == expected.encode(7)


# pamqp defaults channel.open out_of_band and channel.open-ok channel_id to "0", the spec to ""
PAMQP_SAME_DEFAULTS = [m for m in PAMQP if m.name not in ("channel.open", "channel.open-ok")]


@pytest.mark.parametrize("spec", PAMQP_SAME_DEFAULTS, ids=lambda m: m.name)
def test_pamqp_defaults_agree(spec):
    # methods built from defaults only (plus pamqp-valid required values) encode identically
    values = R.pamqp_values(spec)
    required = {a.py_name: values[a.py_name] for a in spec.args if not a.has_default}
    ours = build(spec, required).encode(3)
    theirs = pamqp_frame.marshal(pamqp_command(spec, required), 3)
    assert ours == theirs


def test_reprs_mask_credentials():
    """Frames get logged: the login response and a refreshed token never show in a repr."""
    password, token = "pa55-w0rd-xyz", b"eyJ-token-abc"
    cases = [
        (codec.ConnectionStartOk({"product": "t"}, "PLAIN", b"\x00user\x00" + password.encode(), "en_US"), "response"),
        (codec.ConnectionSecureOk(password.encode()), "response"),
        (codec.ConnectionUpdateSecret(token, "refresh"), "new_secret"),
    ]
    for method, field in cases:
        text = repr(method)
        assert password not in text and token.decode() not in text, text
        assert f"{field}=<masked>" in text, text
        again = codec.decode_method(method.encode_payload())
        assert again == method and getattr(again, field) == getattr(method, field)  # only the repr hides it
    assert "mechanism='PLAIN'" in repr(cases[0][0]) and "reason='refresh'" in repr(cases[2][0])
    assert repr(codec.ConnectionSecure(b"challenge")) == "ConnectionSecure(challenge=b'challenge')"
