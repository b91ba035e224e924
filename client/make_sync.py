"""Write the blocking twins of the async flows: operations_sync.py from operations_async.py,
producer/flows_sync.py from producer/flows_async.py, retry_sync.py from retry_async.py,
stream/operations_sync.py from stream/operations_async.py.

    python client/make_sync.py           # rewrite the generated files
    python client/make_sync.py --check   # exit 1 when a committed file drifts

The rewrite works on tokens, so words in strings and comments stay as they are: the
``async`` keyword before ``def``/``with``/``for`` and every ``await`` are dropped, the
names below are renamed (also a string that is only such a name, as in ``__all__``).

``Opener[T]`` (a type) becomes ``T`` and ``Opener(x)`` (a value) becomes ``(x)``: on
asyncio a call that opens something returns an object to ``await`` or ``async with``; the
blocking call returns the thing itself.  ``Opener,`` in an import goes.

What only one transport has (the blocking ``process_events`` and ``start_consuming``, the
asyncio Producer's ``__await__``, what follows a stream batch's write, ...) lives in the
backends (``io_threads`` / ``io_asyncio``, the ``waiting_*`` modules), reached through names
this renaming maps: the source carries no transport's blocks.

Everything else is kept byte for byte.
"""
from __future__ import annotations

import io
import sys
import tokenize
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: (source, generated twin)
FILES = [
    (HERE / "operations_async.py", HERE / "operations_sync.py"),
    (HERE / "producer" / "flows_async.py", HERE / "producer" / "flows_sync.py"),
    (HERE / "retry_async.py", HERE / "retry_sync.py"),
    (HERE / "stream" / "operations_async.py", HERE / "stream" / "operations_sync.py"),
]

RENAMES = {
    "AsyncConnection": "SyncConnection",
    "AsyncChannel": "SyncChannel",
    "AsyncConsumer": "SyncConsumer",
    "AsyncStreamConsumer": "SyncStreamConsumer",
    "AsyncMessage": "Message",  # one class at run time; two to type checkers (message.py)
    "AsyncProducer": "SyncProducer",
    "AsyncioWaiting": "ThreadWaiting",
    "AsyncioSendFuture": "SendFuture",
    "waiting_asyncio": "waiting_threads",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "StopAsyncIteration": "StopIteration",
    "AsyncIterator": "Iterator",
    # each connection's I/O: the module, its class, and the confirm future it gives publishers
    "io_asyncio": "io_threads",
    "AsyncioIO": "ThreadIO",
    "ConfirmFuture": "PublishFuture",
    "AsyncConnectionIO": "SyncConnectionIO",
    "AsyncioConnectionAPI": "ThreadConnectionAPI",  # the public calls only one transport has
    "AsyncioChannelAPI": "ThreadChannelAPI",
    "AsyncioProducerAPI": "ThreadProducerAPI",
    # the stream-protocol client (client/stream/)
    "AsyncLink": "SyncLink",
    "AsyncStreamConnection": "SyncStreamConnection",
    "AsyncStreamProducer": "SyncStreamProducer",
    "StreamAsyncioWaiting": "StreamThreadWaiting",
    "AsyncioStreamFuture": "StreamFuture",
}

#: ``Opener[T]`` -> ``T``, ``Opener(x)`` -> ``(x)``
UNWRAP = {"Opener"}

HEADER = (
    "# GENERATED from {name} by client/make_sync.py: do not edit.\n"
    "# The blocking transport's flows; tests/test_client_sync.py checks it is up to date.\n"
)


def _closing(tokens: list[tokenize.TokenInfo], index: int) -> int:
    """The index of the bracket closing the one at ``index``."""
    depth = 0
    for at in range(index, len(tokens)):
        if tokens[at].type == tokenize.OP and tokens[at].string in "([{":
            depth += 1
        elif tokens[at].type == tokenize.OP and tokens[at].string in ")]}":
            depth -= 1
            if depth == 0:
                return at
    raise SyntaxError(f"unclosed bracket at line {tokens[index].start[0]}")


def to_sync(source: str, name: str = "operations_async.py") -> str:
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def position(row: int, col: int) -> int:
        return offsets[row - 1] + col

    edits: list[tuple[int, int, str]] = []
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for index, token in enumerate(tokens):
        text = token.string
        if token.type == tokenize.STRING and text[1:-1] in RENAMES and text[0] == text[-1]:
            edits.append((position(*token.start), position(*token.end), text[0] + RENAMES[text[1:-1]] + text[0]))
            continue
        if token.type != tokenize.NAME:
            continue
        start = position(*token.start)
        end = position(*token.end)
        if token.string == "await" or (
            token.string == "async" and index + 1 < len(tokens) and tokens[index + 1].string in ("def", "with", "for")
        ):
            following = tokens[index + 1]
            edits.append((start, position(*following.start), ""))  # the keyword and its space
        elif token.string in UNWRAP and index + 1 < len(tokens) and tokens[index + 1].string == ",":
            edits.append((start, position(*tokens[index + 2].start), ""))  # imported: nothing to import
        elif (token.string in UNWRAP and index + 1 < len(tokens)
              and tokens[index + 1].string in ("[", "(")):
            close = tokens[_closing(tokens, index + 1)]
            if tokens[index + 1].string == "[":  # Opener[T] -> T
                edits.append((start, position(*tokens[index + 2].start), ""))
                edits.append((position(*close.start), position(*close.end), ""))
            else:  # Opener(x) -> (x)
                edits.append((start, end, ""))
        elif token.string in RENAMES:
            edits.append((start, end, RENAMES[token.string]))
    out = source
    for start, end, text in sorted(edits, reverse=True):
        out = out[:start] + text + out[end:]
    return HEADER.format(name=name) + out


def main(argv: list[str]) -> int:
    status = 0
    for source, target in FILES:
        text = to_sync(source.read_text(), source.relative_to(HERE).as_posix())
        if "--check" in argv:
            if not target.exists() or target.read_text() != text:
                print(f"{target} is out of date: run python client/make_sync.py", file=sys.stderr)
                status = 1
            continue
        target.write_text(text)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
