"""The client's state lives in its state module (client/lifecycle.py, client/stream/lifecycle.py):
a field assigned a literal True or False elsewhere is a state kept by hand.  Their number may
only go down; a new one is a fact for a state table or a view derived from one."""
from __future__ import annotations

import ast
from pathlib import Path

CLIENT = Path(__file__).resolve().parent.parent / "client"
#: The most distinct private names assigned True or False outside the state module (issue 38).
MOST = 8


def _flag_fields(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if not (isinstance(value, ast.Constant) and isinstance(value.value, bool)):
            continue
        for target in targets:
            for part in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if isinstance(part, ast.Attribute) and part.attr.startswith("_") and not part.attr.startswith("__"):
                    names.add(part.attr)
    return names


def flag_fields() -> dict[str, list[str]]:
    """name -> the files assigning it True or False (outside the state module and the
    generated blocking twins)."""
    found: dict[str, list[str]] = {}
    for path in sorted(CLIENT.rglob("*.py")):
        if path.name == "lifecycle.py" or path.name.endswith("_sync.py"):
            continue
        for name in _flag_fields(path.read_text()):
            found.setdefault(name, []).append(str(path.relative_to(CLIENT.parent)))
    return found


def test_the_walk_finds_flags_of_any_owner_and_only_literal_booleans():
    source = "self._a = True\nx._b: bool = False\nself._c = self._d = False\nself._e = 1\nself._f = None\nself.g = True\n"
    assert _flag_fields(source) == {"_a", "_b", "_c", "_d"}


def test_no_new_state_is_kept_in_a_flag_outside_the_state_module():
    found = flag_fields()
    listing = "\n".join(f"{name}: {', '.join(paths)}" for name, paths in sorted(found.items()))
    assert len(found) <= MOST, f"{len(found)} private fields assigned True/False (at most {MOST}):\n{listing}"
