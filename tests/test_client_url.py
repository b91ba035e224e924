"""amqwire.client.url: parse_url and ConnectionParameters (no network)."""
import dataclasses
import pickle

import pytest

from amqwire.client.url import ConnectionParameters, parse_url

SECRET = "s3cr3t-Pa55w0rd"


# --- defaults -------------------------------------------------------------------------


def test_amqp_defaults():
    p = parse_url("amqp://guest:guest@127.0.0.1/")
    assert isinstance(p, ConnectionParameters)
    assert (p.host, p.port, p.vhost, p.username, p.password) == ("127.0.0.1", 5672, "/", "guest", "guest")
    assert p.ssl is False
    assert p.verify is True
    assert p.auth_mechanism == "PLAIN"
    assert (p.cafile, p.certfile, p.keyfile, p.server_hostname) == (None, None, None, None)
    assert isinstance(p.heartbeat, int) and isinstance(p.frame_max, int) and isinstance(p.channel_max, int)
    assert isinstance(p.connection_timeout, float) and p.connection_timeout > 0


def test_amqps_defaults():
    p = parse_url("amqps://guest:guest@broker.example.com/")
    assert p.ssl is True
    assert p.port == 5671
    assert p.verify is True  # TLS verifies by default
    assert p.host == "broker.example.com"


def test_minimal_urls_use_defaults():
    p = parse_url("amqp://")
    assert (p.port, p.vhost, p.username, p.password) == (5672, "/", "guest", "guest")
    assert p.host  # some default host
    p = parse_url("amqp://rabbit")
    assert (p.host, p.port, p.vhost) == ("rabbit", 5672, "/")


def test_explicit_port():
    assert parse_url("amqp://h:5673/").port == 5673
    assert parse_url("amqps://h:15671").port == 15671


def test_scheme_is_case_insensitive():
    assert parse_url("AMQPS://h/").ssl is True


def test_default_parameters_match_parse_url_defaults():
    assert ConnectionParameters() == parse_url("amqp://")


# --- percent-encoding and vhosts ----------------------------------------------------------


@pytest.mark.parametrize(
    "path, vhost",
    [
        ("", "/"),
        ("/", "/"),
        ("/%2F", "/"),
        ("/%2f", "/"),
        ("/vh", "vh"),
        ("/%2Fx", "/x"),
        ("/a%2Fb", "a/b"),
        ("/my%20vhost", "my vhost"),
        ("/caf%C3%A9", "caf\u00e9"),
    ],
)
def test_vhost_from_path(path, vhost):
    assert parse_url("amqp://h" + path).vhost == vhost


def test_vhost_with_unencoded_slash_is_refused_or_kept_whole():
    # RabbitMQ's URI spec: the vhost is one path segment; '/' must be written %2F.
    try:
        p = parse_url("amqp://h/a/b")
    except ValueError as exc:
        assert "vhost" in str(exc)
    else:
        assert p.vhost == "a/b"


def test_percent_encoded_user_and_password():
    p = parse_url("amqp://us%40er%3Aname:p%40ss%3Aw%2Fo%25rd@h/")
    assert p.username == "us@er:name"
    assert p.password == "p@ss:w/o%rd"


def test_utf8_user_and_password():
    p = parse_url("amqp://%C3%BCser:p%C3%A4ss@h/")
    assert (p.username, p.password) == ("\u00fcser", "p\u00e4ss")


def test_empty_password():
    p = parse_url("amqp://user:@h/")
    assert (p.username, p.password) == ("user", "")


def test_ipv6_host():
    p = parse_url("amqp://u:p@[::1]:5673/vh")
    assert (p.host, p.port, p.vhost) == ("::1", 5673, "vh")
    p = parse_url("amqp://[::1]")
    assert (p.host, p.port) == ("::1", 5672)
    p = parse_url("amqps://[2001:db8::10]/")
    assert (p.host, p.port) == ("2001:db8::10", 5671)


# --- query options --------------------------------------------------------------------------


def test_tuning_options():
    p = parse_url("amqp://h/?heartbeat=10&frame_max=131072&channel_max=2047&connection_timeout=5")
    assert (p.heartbeat, p.frame_max, p.channel_max) == (10, 131072, 2047)
    assert p.connection_timeout == 5.0
    assert isinstance(p.connection_timeout, float)


def test_connection_timeout_fractional():
    assert parse_url("amqp://h?connection_timeout=2.5").connection_timeout == 2.5


@pytest.mark.parametrize("key", ["heartbeat", "channel_max", "frame_max"])
def test_zero_means_no_limit_or_disabled(key):
    assert getattr(parse_url(f"amqp://h?{key}=0"), key) == 0


def test_limits_at_the_edges():
    p = parse_url("amqp://h?channel_max=65535&frame_max=4096&heartbeat=65535")
    assert (p.channel_max, p.frame_max, p.heartbeat) == (65535, 4096, 65535)


def test_tls_options():
    p = parse_url(
        "amqps://u:p@h/?cafile=%2Fetc%2Fca.pem&certfile=/etc/cert.pem&keyfile=/etc/key.pem"
        "&verify=false&server_hostname=rabbit.example.com"
    )
    assert p.ssl is True
    assert p.cafile == "/etc/ca.pem"
    assert p.certfile == "/etc/cert.pem"
    assert p.keyfile == "/etc/key.pem"
    assert p.verify is False
    assert p.server_hostname == "rabbit.example.com"


@pytest.mark.parametrize("text, value", [("true", True), ("false", False), ("1", True), ("0", False),
                                         ("TRUE", True), ("False", False)])
def test_verify_values(text, value):
    assert parse_url(f"amqps://h?verify={text}").verify is value


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN", "EXTERNAL"])
def test_auth_mechanism(mechanism):
    assert parse_url(f"amqps://h?auth_mechanism={mechanism}").auth_mechanism == mechanism


def test_options_combined_with_everything():
    p = parse_url("amqps://alice:%F0%9F%94%91@[::1]:5999/%2Fprod?heartbeat=5&auth_mechanism=AMQPLAIN&verify=true")
    assert (p.username, p.password, p.host, p.port, p.vhost) == ("alice", "\U0001f511", "::1", 5999, "/prod")
    assert (p.heartbeat, p.auth_mechanism, p.verify, p.ssl) == (5, "AMQPLAIN", True, True)


# --- errors: each a ValueError naming what is wrong ----------------------------------------


@pytest.mark.parametrize("url", ["http://h/", "amqpx://h/", "h:5672", "rabbitmq://h"])
def test_unknown_scheme(url):
    with pytest.raises(ValueError, match="scheme"):
        parse_url(url)


def test_unknown_query_key():
    with pytest.raises(ValueError, match="bogus_option"):
        parse_url("amqp://h/?heartbeat=10&bogus_option=1")


@pytest.mark.parametrize(
    "query, key",
    [
        ("heartbeat=abc", "heartbeat"),
        ("heartbeat=1.5", "heartbeat"),
        ("heartbeat=", "heartbeat"),
        ("frame_max=lots", "frame_max"),
        ("channel_max=0x10", "channel_max"),
        ("connection_timeout=soon", "connection_timeout"),
        ("connection_timeout=", "connection_timeout"),
    ],
)
def test_non_numeric_values(query, key):
    with pytest.raises(ValueError, match=key):
        parse_url("amqp://h/?" + query)


@pytest.mark.parametrize(
    "query, key",
    [
        ("channel_max=65536", "channel_max"),
        ("channel_max=-1", "channel_max"),
        ("frame_max=4095", "frame_max"),
        ("frame_max=100", "frame_max"),
        ("frame_max=-1", "frame_max"),
        ("frame_max=4294967296", "frame_max"),
        ("heartbeat=-1", "heartbeat"),
        ("heartbeat=65536", "heartbeat"),
        ("connection_timeout=0", "connection_timeout"),
        ("connection_timeout=-1", "connection_timeout"),
        ("connection_timeout=nan", "connection_timeout"),
    ],
)
def test_out_of_range_values(query, key):
    with pytest.raises(ValueError, match=key):
        parse_url("amqp://h/?" + query)


def test_bad_verify_value():
    with pytest.raises(ValueError, match="verify"):
        parse_url("amqps://h/?verify=maybe")


def test_bad_auth_mechanism():
    with pytest.raises(ValueError, match="auth_mechanism"):
        parse_url("amqp://h/?auth_mechanism=GSSAPI")


@pytest.mark.parametrize("url", ["amqp://h:99999/", "amqp://h:0/", "amqp://h:port/", "amqp://h:-1/"])
def test_bad_port(url):
    with pytest.raises(ValueError, match="port"):
        parse_url(url)


def test_malformed_ipv6():
    with pytest.raises(ValueError):
        parse_url("amqp://[::1/")


def test_not_a_string():
    with pytest.raises((TypeError, ValueError)):
        parse_url(b"amqp://h/")


# --- the password never shows --------------------------------------------------------------


def test_repr_and_str_hide_the_password():
    p = parse_url(f"amqp://alice:{SECRET}@h:5672/vh?heartbeat=5")
    assert p.password == SECRET
    for text in (repr(p), str(p), f"{p}", f"{p!r}", repr([p]), repr({"p": p})):
        assert SECRET not in text
    assert "alice" in repr(p)
    assert "h" in str(p)


def test_repr_hides_a_percent_encoded_password():
    p = parse_url("amqp://alice:%73%33%63%72%33%74%2Fx@h/")
    assert p.password == "s3cr3t/x"
    assert "s3cr3t" not in repr(p) and "s3cr3t" not in str(p)
    assert "%73%33" not in repr(p) and "%73%33" not in str(p)


def test_direct_construction_hides_the_password():
    p = ConnectionParameters(host="h", username="bob", password=SECRET)
    assert SECRET not in repr(p) and SECRET not in str(p)


@pytest.mark.parametrize(
    "query",
    ["bogus=1", "heartbeat=x", "frame_max=1", "channel_max=70000", "connection_timeout=-3", "verify=maybe"],
)
def test_error_messages_never_contain_the_password(query):
    url = f"amqps://alice:{SECRET}@h:5671/vh?{query}"
    with pytest.raises(ValueError) as info:
        parse_url(url)
    assert SECRET not in str(info.value)
    assert SECRET not in repr(info.value)


def test_bad_port_message_does_not_contain_the_password():
    with pytest.raises(ValueError) as info:
        parse_url(f"amqp://alice:{SECRET}@h:notaport/")
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("url", [
    "amqp://user:5690/SECRETPART@host",                  # read as host user, port 5690, vhost SECRETPART@host
    "amqp://user:5690?SECRETPART@host",                  # ... or as a query option SECRETPART@host
    "amqp://user:5690/x?SECRETPART@host/",
    "amqp://user:pw#SECRETPART@host",
    "amqps://user:12/SECRETPART@host:5671/vh?heartbeat=5",
])
def test_a_raw_slash_or_question_mark_in_the_password_is_refused_without_echoing_it(url):
    with pytest.raises(ValueError, match="percent-encode") as info:
        parse_url(url)
    assert "SECRETPART" not in str(info.value) and "SECRETPART" not in repr(info.value)
    assert "5690" not in str(info.value)


def test_the_same_password_percent_encoded_is_accepted():
    p = parse_url("amqp://user:5690%2FSECRETPART@host")
    assert (p.host, p.port, p.password, p.vhost) == ("host", 5672, "5690/SECRETPART", "/")


@pytest.mark.parametrize("query", ["heartbeat=1&heartbeat=2", "verify=false&verify=true", "cafile=a&cafile=a"])
def test_a_query_option_given_twice_is_an_error(query):
    with pytest.raises(ValueError, match="given more than once"):
        parse_url(f"amqps://h/?{query}")


# --- the dataclass -----------------------------------------------------------------------


def test_parameters_are_frozen():
    p = parse_url("amqp://h/")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.host = "other"  # type: ignore[misc]


def test_parameters_compare_and_hash():
    a = parse_url("amqp://u:p@h/vh?heartbeat=5")
    b = parse_url("amqp://u:p@h:5672/vh?heartbeat=5")
    assert a == b and hash(a) == hash(b)
    assert a != parse_url("amqp://u:other@h/vh?heartbeat=5")


def test_parameters_pickle():
    p = parse_url(f"amqps://alice:{SECRET}@h/vh?heartbeat=7&cafile=/ca.pem")
    assert pickle.loads(pickle.dumps(p)) == p


def test_fields_of_the_contract():
    names = {f.name for f in dataclasses.fields(ConnectionParameters)}
    assert {
        "host", "port", "vhost", "username", "password", "heartbeat", "frame_max", "channel_max",
        "connection_timeout", "ssl", "cafile", "certfile", "keyfile", "verify", "server_hostname",
        "locale", "auth_mechanism",
    } <= names


def test_construction_validates_too():
    with pytest.raises(ValueError, match="channel_max"):
        ConnectionParameters(channel_max=65536)
    with pytest.raises(ValueError, match="frame_max"):
        ConnectionParameters(frame_max=1000)
    with pytest.raises(ValueError, match="port"):
        ConnectionParameters(port=70000)
