"""operations_sync.py and producer/flows_sync.py are generated from their async sources
(client/make_sync.py): they must not drift."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_generated_sync_operations_are_up_to_date():
    result = subprocess.run([sys.executable, str(REPO / "client" / "make_sync.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_generator_drops_async_keywords_only_in_code():
    sys.path.insert(0, str(REPO / "client"))
    try:
        import make_sync
    finally:
        sys.path.pop(0)
    source = (
        'class AsyncChannel:\n'
        '    async def f(self) -> None:\n'
        '        """await this; async with that."""\n'
        '        async with self.lock:  # async for in a comment\n'
        '            x = await self.g()\n'
        '        async for y in self.h():\n'
        '            await y\n'
        '    async def __aenter__(self): return self\n'
        '    async def g(self, connection):\n'
        '        lock = connection._lock\n'
        '        lock.acquire()\n'
        '        try:\n'
        '            connection.x = 1  # await in a comment\n'
        '        finally:\n'
        '            lock.release()\n'
        '        return await self.f()\n'
    )
    out = make_sync.to_sync(source)
    body = out.split("\n", 2)[2]  # after the two header lines
    assert body == (
        'class SyncChannel:\n'
        '    def f(self) -> None:\n'
        '        """await this; async with that."""\n'
        '        with self.lock:  # async for in a comment\n'
        '            x = self.g()\n'
        '        for y in self.h():\n'
        '            y\n'
        '    def __enter__(self): return self\n'
        '    def g(self, connection):\n'
        '        lock = connection._lock\n'
        '        lock.acquire()\n'
        '        try:\n'
        '            connection.x = 1  # await in a comment\n'
        '        finally:\n'
        '            lock.release()\n'
        '        return self.f()\n'
    )


def test_the_sources_carry_no_marker_for_the_generator():
    """What differs between the transports lives in the backends: a source has no block
    that only one transport runs, and the generator no rule but renaming."""
    sys.path.insert(0, str(REPO / "client"))
    try:
        import make_sync
    finally:
        sys.path.pop(0)
    import re
    marker = re.compile(r"^\s*if (True|False|_[A-Z_]+)\b.*:", re.M)
    for source, _twin in make_sync.FILES:
        found = marker.findall(source.read_text())
        assert not found, f"{source.name}: {found}"
    generator = (REPO / "client" / "make_sync.py").read_text()
    assert "_LOCKED_SECTION" not in generator


def test_the_generator_unwraps_openers_and_renames_the_transport_only_parts():
    sys.path.insert(0, str(REPO / "client"))
    try:
        import make_sync
    finally:
        sys.path.pop(0)
    source = (
        'class AsyncConnection(ConnectionBase, AsyncioConnectionAPI):\n'
        '    _io: AsyncConnectionIO\n'
        '\n'
        '    def channel(self) -> Opener[AsyncChannel]:\n'
        '        return Opener(self._open(1, f(2)))\n'
        '\n'
        '    def x(self) -> dict[str, Opener[list[int]]]:\n'
        '        "Opener[x] in a string stays"\n'
    )
    body = make_sync.to_sync(source).split("\n", 2)[2]
    assert body == (
        'class SyncConnection(ConnectionBase, ThreadConnectionAPI):\n'
        '    _io: SyncConnectionIO\n'
        '\n'
        '    def channel(self) -> SyncChannel:\n'
        '        return (self._open(1, f(2)))\n'
        '\n'
        '    def x(self) -> dict[str, list[int]]:\n'
        '        "Opener[x] in a string stays"\n'
    )


def test_the_sources_carry_no_transport_blocks():
    """What only one transport has lives in its backend (io_threads, io_asyncio, the
    waiting_* modules): the sources of the generated twins hold no block for one transport."""
    sys.path.insert(0, str(REPO / "client"))
    try:
        import make_sync
    finally:
        sys.path.pop(0)
    for source, _ in make_sync.FILES:
        text = source.read_text()
        for marker in ("# blocking only", "# asyncio only", "if True:", "if False"):
            assert marker not in text, f"{source.name}: {marker!r}"
