"""The generated method classes are committed; they must match the generator's output."""
import subprocess
import sys
from pathlib import Path

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
    # The installed package carries its own copy: nothing at run time needs shared/.
    installed = Path(codec.__file__).parent / "amqp-rabbitmq-0.9.1.json"
    assert installed.read_bytes() == ours.read_bytes()
