"""amqwire.client's modules import one another without a cycle.

The graph is read from the sources with ``ast``: every ``import`` and ``from ... import``,
absolute or relative, at module level or inside a function, a method or an ``if``
(``TYPE_CHECKING`` included: a cycle hidden behind a deferred import is still a cycle).
An edge goes to the module named, or to the submodule when ``from package import name``
names one.  A package's ``__init__`` that Python runs before a submodule is not an edge: it
is the package's, not an import the module makes.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent


def module_names(folder: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (source file, is a package) for every module under ``folder``, Python
    or Cython."""
    modules = {}
    for path in sorted([*folder.rglob("*.py"), *folder.rglob("*.pyx")]):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(folder).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join([package, *parts])] = (path, is_package)
    return modules


def _resolve(name: str, is_package: bool, level: int, target: Optional[str]) -> str:
    """The absolute name of ``from <level dots><target> import ...`` in module ``name``."""
    if level == 0:
        return target or ""
    base = name.split(".")
    base = base[: len(base) - level + (1 if is_package else 0)]
    return ".".join(base + ([target] if target else []))


def _python_of(path: Path) -> str:
    """A module's source as ``ast`` reads it: of a Cython module, its Python import lines
    (``cimport`` is of compiled declarations, resolved at build time)."""
    text = path.read_text()
    if path.suffix != ".pyx":
        return text
    return "\n".join(line for line in text.splitlines() if line.startswith(("import ", "from ")) and " cimport " not in line)


def import_graph(folder: Path, package: str) -> dict[str, set[str]]:
    """module -> the modules of ``package`` it imports."""
    modules = module_names(folder, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        for node in ast.walk(ast.parse(_python_of(path), str(path))):
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(name, is_package, node.level, node.module)
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    found.append(submodule if submodule in modules else source)
            for target in found:
                # "import a.b.c" names a.b.c; outside the package, or the package's own
                # parents (amqwire), it is no edge of this graph
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target == package or target.startswith(package + "."):
                    graph[name].add(target)  # a module importing itself too: a cycle
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a self-import),
    each as a closed path through it: Tarjan's algorithm, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    components.append(_closed_path(graph, set(component)))
    return components


def _closed_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A path inside ``component`` from its first module back to it (for the message)."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return paths[node] + [start]
                if nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    following.append(nxt)
        frontier = following
    return sorted(component)


def test_the_client_has_no_import_cycle():
    graph = import_graph(REPO / "client", "amqwire.client")
    assert "amqwire.client.producer.core" in graph and "amqwire.client.aio" in graph, sorted(graph)
    # the graph sees the edges that matter: the facade, the producer's backend on the connection
    assert "amqwire.client.aio_connection" in graph["amqwire.client.producer.waiting_asyncio"]
    assert {"amqwire.client.aio_connection", "amqwire.client.producer.aio"} <= graph["amqwire.client.aio"]
    assert "amqwire.client.encoding" in graph["amqwire.client.message"]
    found = cycles(graph)
    assert not found, "import cycles in amqwire.client:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_message_does_not_import_the_producer():
    graph = import_graph(REPO / "client", "amqwire.client")
    assert not any(m.startswith("amqwire.client.producer") for m in graph["amqwire.client.message"])


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_finds_a_cycle_through_a_deferred_import(tmp_path):
    # The shape this package had: aio ends by importing the producer, which imports aio,
    # and a message that imports the producer inside a method.
    _write(tmp_path, {
        "__init__.py": "from . import aio\n",
        "aio.py": "def connect(): ...\n\nfrom .producer.aio import Producer  # noqa\n",
        "producer/__init__.py": "",
        "producer/aio.py": "from ..aio import connect\n",
        "producer/core.py": "import pkg.producer.aio\n",
        "message.py": "class M:\n    def f(self):\n        from .producer import core\n",
        "other.py": "from .producer import aio as a\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.message"] == {"pkg.producer.core"}
    assert graph["pkg.producer.core"] == {"pkg.producer.aio"}
    assert graph["pkg.other"] == {"pkg.producer.aio"}
    assert graph["pkg.producer"] == set()
    assert graph["pkg"] == {"pkg.aio"}  # the package's own __init__ is no edge of its modules
    assert cycles(graph) == [["pkg.aio", "pkg.producer.aio", "pkg.aio"]]


def test_the_check_finds_a_self_import_and_passes_a_tree(tmp_path):
    _write(tmp_path, {
        "__init__.py": "from .a import x\nfrom .b import y\n",
        "a.py": "from .b import y\nimport os\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import z\n",
        "b.py": "from . import c\n",
        "c.py": "import json\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.b", "pkg.c"} and graph["pkg.b"] == {"pkg.c"}
    assert cycles(graph) == []
    (tmp_path / "c.py").write_text("def f():\n    import pkg.c\n")
    assert cycles(import_graph(tmp_path, "pkg")) == [["pkg.c", "pkg.c"]]
