"""The installed package is typed for users: py.typed, .pyi stubs for every compiled module."""
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import amqwire.codec as codec

USER_CODE = textwrap.dedent(
    """
    from amqwire.codec import (
        BasicProperties, Command, CommandParser, FrameWriter, QueueDeclare, decode_table,
        encode_publish, encode_table,
    )

    props = BasicProperties(content_type="application/json", delivery_mode=2, headers={"a": 1})
    frames: bytes = encode_publish(1, "ex", "rk", b"body", props)
    writer = FrameWriter(frame_max=131072)
    writer.publish(1, "ex", "rk", b"body", props, mandatory=True)
    declare = QueueDeclare(queue="q", durable=True)
    name: str = declare.queue
    table: dict[str, object] = decode_table(encode_table({"k": [1, 2]}))
    for item in CommandParser().feed(frames):
        if isinstance(item, Command) and item.body is not None:
            size: int = len(item.body)

    import asyncio
    from amqwire.client import Message, PublishFuture, connect, aio

    def blocking_user() -> None:
        with connect("amqp://guest:guest@127.0.0.1:5672/", heartbeat=10) as conn:
            with conn.channel() as ch:
                ch.confirm_select(max_in_flight=100)
                future: PublishFuture = ch.publish_async("", "q", b"x", props)
                future.result(timeout=1.0)
                with ch.consume("q") as consumer:
                    for message in consumer:
                        body: bytes = message.body
                        message.ack()
                got: Message | None = ch.basic_get("q")

    from amqwire.client.listeners import BlockedEvent, CallbackError, ConsumerEvent
    from amqwire.client.metrics import InMemoryMetrics

    def on_blocked(event: BlockedEvent) -> None:
        reason: str = event.reason

    def on_error(failure: CallbackError) -> None:
        error: BaseException = failure.error

    def listening_user() -> None:
        metrics = InMemoryMetrics()
        with connect(exception_handler=on_error, metrics=metrics, consumer_workers=2) as conn:
            conn.add_blocked_listener(on_blocked)
            with conn.channel() as ch:
                ch.add_consumer_listener(lambda event: None)
                ch.set_default_consumer(lambda message: message.ack())
        published: int = metrics.published_count

    import pyarrow as pa  # type: ignore[import-untyped]
    from amqwire.spark import PublishEncoder, RowEncodeError, decode_batch

    def spark_user(conn_frames: bytes) -> None:
        encoder = PublishEncoder(routing_key="q", frame_max=131072, body_format="raw")
        frames: bytes = encoder.encode_frames(pa.array([b"x"]))
        array = encoder.encode(pa.array([b"x"]), headers=None)
        try:
            decode_batch(array)
        except RowEncodeError as exc:
            row: int = exc.row
            field: str = exc.field
        with connect() as conn, conn.channel() as ch:
            batch = ch.publish_encoded(frames, 1)
            if batch is not None:
                batch.result(timeout=1.0)

    async def aio_user() -> None:
        async with aio.connect("amqp://guest:guest@127.0.0.1:5672/") as conn:
            async with conn.channel() as ch:
                await ch.basic_publish("", "q", b"x")
                async with ch.consume("q") as consumer:
                    async for message in consumer:
                        await message.ack()

    import datetime
    from amqwire.client import StreamOffsets, StreamTruncated

    def blocking_stream_user() -> None:
        with connect() as conn, conn.channel() as ch:
            offsets: StreamOffsets = ch.stream_offsets("s")
            first: int | None = offsets.first
            with ch.consume_stream("s", offset=0, end=offsets.last, prefetch=500) as reader:
                for message in reader:
                    at: int | None = message.stream_offset
                truncated: bool = reader.truncated
                resume: int | None = reader.last_offset
            ch.consume_stream("s", offset=datetime.datetime.now(datetime.timezone.utc), on_truncated="raise")
            ch.consume_stream("s", offset="1h")

    async def aio_stream_user() -> None:
        async with aio.connect() as conn:
            async with conn.channel() as ch:
                last: int | None = (await ch.stream_offsets("s")).last
                async with ch.consume_stream("s", offset="first") as reader:
                    try:
                        async for message in reader:
                            at: int | None = message.stream_offset
                    except StreamTruncated as exc:
                        lost: int = exc.lost
                    got = await reader.get(timeout=1.0)
                    if got is not None:
                        body: bytes = got.body
    """
)
WRONG_CODE = "from amqwire.codec import encode_publish\nencode_publish('one', 'ex', 'rk', b'')\n"


def _mypy(tmp_path, source):
    path = tmp_path / "user.py"
    path.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
        capture_output=True, text=True, cwd=tmp_path,
    )


def test_stubs_ship_with_the_package():
    folder = Path(codec.__file__).parent
    assert (folder / "py.typed").exists()
    for module in ("buffer", "table", "properties", "methods", "writer", "parser"):
        assert (folder / f"{module}.pyi").exists(), module
    import amqwire.spark as spark

    folder = Path(spark.__file__).parent
    assert (folder / "py.typed").exists()
    for module in ("arrow_view", "encode"):
        assert (folder / f"{module}.pyi").exists(), module


def test_user_code_type_checks_strictly(tmp_path):
    result = _mypy(tmp_path, USER_CODE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_wrong_argument_types_are_caught(tmp_path):
    result = _mypy(tmp_path, WRONG_CODE)
    assert result.returncode == 1 and "arg-type" in result.stdout, result.stdout


MISSING_AWAIT = textwrap.dedent(
    """
    from amqwire.client import aio

    async def user() -> None:
        async with aio.connect() as conn:
            async with conn.channel() as ch:
                name: str = ch.queue_declare("x").queue
                last = ch.stream_offsets("s").last
                async for message in ch.consume_stream("s"):
                    pass
    """
)

PRECISE_RESULTS = textwrap.dedent(
    """
    from amqwire.client import connect, aio

    def blocking_user() -> None:
        with connect() as conn, conn.channel() as ch:
            count: str = ch.queue_declare("x").message_count
            purged: str = ch.queue_purge("x")

    async def aio_user() -> None:
        async with aio.connect() as conn:
            async with conn.channel() as ch:
                count: str = (await ch.queue_declare("x")).message_count
                got: int = await ch.basic_get("x")

    from amqwire.client.listeners import ShutdownEvent

    def on_closed(event: ShutdownEvent) -> None:
        pass

    def listener_user() -> None:
        with connect() as conn:
            conn.add_close_listener(on_closed)
            conn.add_blocked_listener(on_closed)  # a listener for another event
    """
)


def test_a_missing_await_is_a_type_error(tmp_path):
    result = _mypy(tmp_path, MISSING_AWAIT)
    assert result.returncode == 1, result.stdout
    assert 'Coroutine' in result.stdout and 'has no attribute "queue"' in result.stdout, result.stdout
    assert 'has no attribute "last"' in result.stdout, result.stdout
    assert '"Opener[AsyncStreamConsumer]" has no attribute "__aiter__"' in result.stdout, result.stdout


def test_a_stream_option_outside_its_literals_is_a_type_error(tmp_path):
    source = textwrap.dedent(
        """
        from amqwire.client import connect

        with connect() as conn, conn.channel() as ch:
            ch.consume_stream("s", on_truncated="ignore")
            ch.consume_stream("s", offset=1.5)
        """
    )
    result = _mypy(tmp_path, source)
    assert result.returncode == 1 and result.stdout.count("[arg-type]") == 2, result.stdout


def test_channel_methods_return_their_concrete_types(tmp_path):
    result = _mypy(tmp_path, PRECISE_RESULTS)
    assert result.returncode == 1, result.stdout
    # each wrong annotation is caught: the results are not Any
    assert result.stdout.count("[assignment]") == 4, result.stdout
    # listeners are typed by their event
    assert result.stdout.count("[arg-type]") == 1 and "add_blocked_listener" in result.stdout, result.stdout


def test_the_package_itself_type_checks_strictly(tmp_path):
    # The client, the Python parts of spark, the command and the codec's Python modules and .pyi stubs,
    # as installed; pyproject.toml says pyarrow has no type information.
    config = Path(__file__).resolve().parent.parent / "pyproject.toml"
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", str(config),
         "-p", "amqwire.client", "-p", "amqwire.spark", "-p", "amqwire.codec", "-p", "amqwire.cli"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    checked = re.search(r"in (\d+) source files", result.stdout)
    assert checked and int(checked.group(1)) >= 28, result.stdout  # 6 codec stubs, 2 spark stubs, ...


METHOD_ARGUMENTS = textwrap.dedent(
    """
    from amqwire.codec import BasicDeliver, ChannelClose, ExchangeDeclare, QueueBind

    ok = [ExchangeDeclare(exchange="x"), ExchangeDeclare(0, "x", "topic"), QueueBind(queue="q", exchange="x"),
          BasicDeliver("ctag", 1, False, "ex", "rk"), ChannelClose(404, "NOT_FOUND", 50, 10),
          ChannelClose(200, class_id=0, method_id=0)]
    missing_exchange = ExchangeDeclare()
    missing_ids = ChannelClose(200, "bye")
    """
)


def test_the_stubs_require_what_the_method_classes_require(tmp_path):
    result = _mypy(tmp_path, METHOD_ARGUMENTS)
    lines = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in lines] == ["7", "8"], result.stdout  # the last two lines


STREAM_USER = textwrap.dedent(
    """
    import datetime
    from typing import Optional

    from amqwire.client import stream
    from amqwire.client.stream import aio

    def blocking_user() -> None:
        with stream.connect("rabbitmq-stream://guest:guest@127.0.0.1:5552/", heartbeat=10) as conn:
            conn.create_stream("s", max_age="7D", exist_ok=True)
            exists: bool = conn.stream_exists("s")
            first: Optional[int] = conn.stream_stats("s").first_offset
            with conn.producer("s", reference="r") as producer:
                future: stream.StreamFuture = producer.send(b"x", properties={"message_id": "m"})
                publishing_id: int = future.result(timeout=1.0)
                producer.flush()
                last: int = producer.last_publishing_id
            with conn.consumer("s", offset=datetime.datetime(2024, 1, 1), end=9, name="c") as consumer:
                for message in consumer:
                    offset: int = message.offset
                    when: datetime.datetime = message.chunk_timestamp
                consumer.store_offset()
                stored: Optional[int] = consumer.query_offset()

    async def aio_user() -> None:
        async with aio.connect("rabbitmq-stream://guest:guest@127.0.0.1:5552/") as conn:
            await conn.create_stream("s")
            async with conn.producer("s") as producer:
                future = await producer.send(b"x")
                publishing_id: int = await future
            async with conn.consumer("s", offset="first") as consumer:
                async for message in consumer:
                    offset: int = message.offset
                got: Optional[aio.StreamMessage] = await consumer.get(1.0)
    """
)

STREAM_MISTAKES = textwrap.dedent(
    """
    from amqwire.client import stream
    from amqwire.client.stream import aio

    def blocking_user() -> None:
        with stream.connect() as conn, conn.producer("s") as producer:
            publishing_id: str = producer.send(b"x").result()

    async def aio_user() -> None:
        async with aio.connect() as conn:
            exists: bool = conn.stream_exists("s")
            producer = await conn.producer("s")
            publishing_id: str = await (await producer.send(b"x"))
    """
)


def test_the_stream_client_is_typed_for_users(tmp_path):
    result = _mypy(tmp_path, STREAM_USER)
    assert result.returncode == 0, result.stdout + result.stderr
    wrong = _mypy(tmp_path, STREAM_MISTAKES)
    assert wrong.returncode == 1, wrong.stdout
    # each wrong annotation is caught (the results are not Any), and a missing await too
    assert wrong.stdout.count("[assignment]") == 3 and "Coroutine" in wrong.stdout, wrong.stdout
