"""The generated method classes are committed; they must match the generator's output."""
import subprocess
import sys
from pathlib import Path

import pytest

import amqwire.codec as codec

REPO = Path(__file__).resolve().parent.parent


def test_generated_methods_are_up_to_date():
    result = subprocess.run(
        [sys.executable, str(REPO / "codec" / "codegen.py"), "--check"],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr


def test_generator_output_matches_the_spec_in_the_repo(tmp_path):
    # The drift check itself must be able to fail: a changed spec gives a different output.
    sys.path.insert(0, str(REPO / "codec"))
    try:
        import codegen
    finally:
        sys.path.pop(0)
    spec, methods = codegen.load()
    assert len(methods) == 66
    assert len({m.index for m in methods}) == 66
    text = codegen.gen_pyx(methods)
    methods[0].args[0].name = "renamed"
    assert codegen.gen_pyx(methods) != text


def test_the_repo_spec_is_the_shared_spec_when_present():
    shared = REPO.parent / "shared" / "spec" / "amqp-rabbitmq-0.9.1.json"
    ours = REPO / "codec" / "amqp-rabbitmq-0.9.1.json"
    if shared.exists():
        assert shared.read_bytes() == ours.read_bytes()
    # Nothing at run time reads the spec (the generated classes hold it): the wheel does not
    # carry it (tests/test_packaging.py), and the installed codec has all its methods.
    assert not (Path(codec.__file__).parent / "amqp-rabbitmq-0.9.1.json").exists()
    assert len(codec.METHODS) == 66


SAMPLES = {"int": 1, "str": "x", "bool": True, "bytes | str": b"x", "dict[str, Any] | None": {"k": 1}}


def _stub_inits():
    """{class name: [[(name, annotation, kind, optional), ...] per overload]} from the
    installed methods.pyi."""
    import ast

    tree = ast.parse((Path(codec.__file__).parent / "methods.pyi").read_text())
    out = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name == "Method":
            continue
        sigs = []
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                a = item.args
                params = []
                positional = a.args[1:]
                defaults = [None] * (len(positional) - len(a.defaults)) + a.defaults
                for arg, default in zip(positional, defaults):
                    params.append((arg.arg, ast.unparse(arg.annotation), "pos", default is not None))
                for arg, default in zip(a.kwonlyargs, a.kw_defaults):
                    params.append((arg.arg, ast.unparse(arg.annotation), "kw", default is not None))
                sigs.append(params)
        out[node.name] = sigs
    return out


def _call(cls, params, leave_out=None):
    args, kwargs = [], {}
    for name, annotation, kind, optional in params:
        if optional or name == leave_out:
            continue
        if kind == "pos" and leave_out is None:
            args.append(SAMPLES[annotation])
        else:
            kwargs[name] = SAMPLES[annotation]
    return cls(*args, **kwargs)


def test_the_stubs_promise_exactly_the_defaults_the_classes_have():
    # Every class, every overload of its stub: a call giving only what the stub requires
    # works, and leaving out an argument that every overload requires is a TypeError.
    # (stubtest cannot see this: a cdef class's __init__ has no runtime signature.)
    inits = _stub_inits()
    assert len(inits) == 66
    overloaded = sorted(name for name, sigs in inits.items() if len(sigs) > 1)
    assert overloaded == sorted([
        "BasicDeliver", "BasicGetOk", "BasicReturn", "ChannelClose", "ConnectionClose",
        "ConnectionStart", "ConnectionStartOk", "ExchangeBind", "ExchangeDeclare", "ExchangeDelete",
        "ExchangeUnbind", "QueueBind", "QueueUnbind"])
    for name, sigs in inits.items():
        cls = getattr(codec, name)
        for params in sigs:
            made = _call(cls, params)
            assert made == _call(cls, params), name
        always_required = set.intersection(*({p[0] for p in params if not p[3]} for params in sigs))
        for missing in always_required:
            params = sigs[-1]
            with pytest.raises(TypeError, match=f"{missing}: missing required argument"):
                _call(cls, params, leave_out=missing)


def test_exchange_declare_needs_its_exchange():
    with pytest.raises(TypeError, match="exchange.declare.exchange: missing required argument"):
        codec.ExchangeDeclare()
    assert codec.ExchangeDeclare(exchange="x").exchange_type == "direct"
    assert codec.ExchangeDeclare(0, "x", "topic").exchange_type == "topic"
