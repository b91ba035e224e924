"""OpenTelemetry tracing (amqwire.client.tracing) on a real broker, spans taken from the SDK's
in-memory exporter: the ``send`` span and its ``traceparent`` header, ``process`` spans of
iterators and callbacks on both transports, basic.get's ``receive`` span, the Producer, the
bridge between two queues of the shared broker, the Spark sink's ``traceparentColumn``, and
that a connection without tracing imports nothing of OpenTelemetry and leaves headers alone."""
from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap

import pytest

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from amqwire.client import BasicProperties, Producer, aio, connect
from amqwire.client.tracing import Tracing, TracingUnavailable, tracing_from_option

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")  # flags: sampled, maybe random (level 2)


@pytest.fixture
def traced():
    """A TracerProvider of this test alone, and the exporter that holds its spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def spans_named(exporter, prefix):
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def only(spans, what):
    assert len(spans) == 1, f"{what}: {[s.name for s in spans]}"
    return spans[0]


def check_send(send, queue, body_size):
    assert send.name == f"send {queue}"
    assert send.kind is SpanKind.PRODUCER
    attributes = send.attributes
    assert attributes["messaging.system"] == "rabbitmq"
    assert attributes["messaging.operation.type"] == "send"
    assert attributes["messaging.destination.name"] == ""  # the default exchange
    assert attributes["messaging.rabbitmq.destination.routing_key"] == queue
    assert attributes["messaging.message.body.size"] == body_size
    assert attributes["server.address"] and attributes["server.port"] > 0
    assert attributes["network.peer.address"] and attributes["network.peer.port"] == attributes["server.port"]


def check_child(span, parent, operation, queue):
    assert span.name == f"{operation} {queue}"
    assert span.kind is SpanKind.CONSUMER
    assert span.attributes["messaging.operation.type"] == operation
    assert span.attributes["messaging.destination.subscription.name"] == queue
    assert span.context.trace_id == parent.context.trace_id
    assert span.parent is not None and span.parent.span_id == parent.context.span_id


def header_ids(message):
    match = TRACEPARENT.match(message.properties.headers["traceparent"])
    assert match, message.properties.headers
    return int(match.group(1), 16), int(match.group(2), 16)


def test_publish_writes_traceparent_into_a_copy_of_the_headers_and_get_continues_it(amqp_url, names, traced):
    provider, exporter = traced
    queue = names.queue()
    properties = BasicProperties(headers={"kept": 1}, message_id="m-1")
    with connect(amqp_url, tracing=provider) as conn:
        ch = conn.channel()
        ch.queue_declare(queue)
        ch.basic_publish("", queue, b"hello", properties)
        ch.basic_publish("", queue, b"plain")
        assert properties.headers == {"kept": 1}  # the caller's object is untouched
        first = ch.basic_get(queue, no_ack=True)
        second = ch.basic_get(queue, no_ack=True)
        assert ch.basic_get(queue, no_ack=True) is None
    sends = spans_named(exporter, "send ")
    assert len(sends) == 2
    for send, message, size in zip(sends, (first, second), (5, 5)):
        check_send(send, queue, size)
        assert header_ids(message) == (send.context.trace_id, send.context.span_id)
    assert first.properties.headers["kept"] == 1 and first.properties.message_id == "m-1"
    assert sends[0].attributes["messaging.message.id"] == "m-1"
    receives = spans_named(exporter, "receive ")
    assert len(receives) == 2  # none for the empty queue's get-empty
    for receive, send in zip(receives, sends):
        check_child(receive, send, "receive", queue)


def test_a_failed_publish_is_recorded_on_its_span(amqp_url, names, traced):
    provider, exporter = traced
    with connect(amqp_url, tracing=provider) as conn:
        ch = conn.channel()
        ch.confirm_select()
        with pytest.raises(Exception) as raised:
            ch.basic_publish(names.unique("missing-x"), "rk", b"x")
    send = only(spans_named(exporter, "send "), "the send spans")
    assert send.status.status_code is StatusCode.ERROR
    assert any(e.name == "exception" for e in send.events), raised.value


def user_span_under(provider, name):
    """A span the user's handling code starts: it must be a child of the process span."""
    return provider.get_tracer("the-user").start_as_current_span(name)


@pytest.mark.parametrize("mode", ["blocking iterator", "blocking callback", "asyncio iterator",
                                  "asyncio callback", "asyncio coroutine callback"])
def test_consume_continues_the_trace_in_a_process_span(amqp_url, names, traced, mode):
    provider, exporter = traced
    queue = names.queue()
    count = 3
    with connect(amqp_url, tracing=provider) as conn:
        ch = conn.channel()
        ch.queue_declare(queue)
        for i in range(count):
            ch.basic_publish("", queue, b"m%d" % i)
    if mode.startswith("blocking"):
        consume_blocking(amqp_url, queue, count, provider, exporter, callback=mode.endswith("callback"))
    else:
        asyncio.run(consume_asyncio(amqp_url, queue, count, provider, exporter, mode))
    sends = spans_named(exporter, "send ")
    processes = spans_named(exporter, "process ")
    assert len(sends) == count and len(processes) == count, [s.name for s in exporter.get_finished_spans()]
    users = {s.name: s for s in spans_named(exporter, "handling ")}
    for i, (send, process) in enumerate(zip(sends, processes)):
        check_send(send, queue, 2)
        check_child(process, send, "process", queue)
        user = users[f"handling m{i}"]
        assert user.parent.span_id == process.context.span_id  # the handling ran inside it


def consume_blocking(url, queue, count, provider, exporter, callback):
    handled = []

    def handle(message):
        with user_span_under(provider, f"handling {message.body.decode()}"):
            handled.append(message.body)
            message.ack()

    with connect(url, tracing=provider) as conn:
        ch = conn.channel()
        if callback:
            ch.consume(queue, handle)
            while len(handled) < count:
                conn.process_events(5)
            return
        consumer = ch.consume(queue)
        for message in consumer:
            if handled:  # asking for this one ended the last one's span
                assert len(spans_named(exporter, "process ")) == len(handled)
            handle(message)
            if len(handled) == count:
                break
        assert len(spans_named(exporter, "process ")) == count - 1  # the last is open until asked again
        consumer.cancel()  # ... or the consumer ends


async def consume_asyncio(url, queue, count, provider, exporter, mode):
    handled = []
    done = asyncio.Event()

    def handle(message):
        with user_span_under(provider, f"handling {message.body.decode()}"):
            handled.append(message.body)
        if len(handled) == count:
            done.set()

    async def handle_async(message):
        with user_span_under(provider, f"handling {message.body.decode()}"):
            await asyncio.sleep(0)
            await message.ack()
            handled.append(message.body)
        if len(handled) == count:
            done.set()

    async with aio.connect(url, tracing=provider) as conn:
        ch = await conn.channel()
        if mode == "asyncio iterator":
            async with ch.consume(queue, no_ack=True) as consumer:
                async for message in consumer:
                    handle(message)
                    if len(handled) == count:
                        break
            return
        await ch.consume(queue, handle_async if "coroutine" in mode else handle, no_ack="coroutine" not in mode)
        await asyncio.wait_for(done.wait(), 30)


@pytest.mark.parametrize("transport", ["blocking", "asyncio"])
def test_producer_send_span_from_call_to_confirm_and_its_traceparent(amqp_url, names, traced, transport):
    provider, exporter = traced
    queue = names.queue()
    with connect(amqp_url) as conn:
        conn.channel().queue_declare(queue)
    with provider.get_tracer("the-user").start_as_current_span("request") as request:
        if transport == "blocking":
            with Producer(amqp_url, tracing=provider) as producer:
                results = [producer.send("", queue, b"p%d" % i) for i in range(2)]
                results.append(producer.send_async("", queue, b"p2").result(30))
        else:
            async def send_all():
                async with aio.Producer(amqp_url, tracing=provider) as producer:
                    return [await producer.send("", queue, b"p%d" % i) for i in range(3)]

            results = asyncio.run(send_all())
    sends = spans_named(exporter, "send ")
    assert len(sends) == 3
    with connect(amqp_url) as conn:  # no tracing: the headers as the producer wrote them
        got = [conn.channel().basic_get(queue, no_ack=True) for _ in range(3)]
    by_id = {s.attributes["messaging.message.id"]: s for s in sends}
    for message, result in zip(got, results):
        send = by_id[result.message_id]
        check_send(send, queue, 2)
        assert send.parent.span_id == request.get_span_context().span_id
        assert header_ids(message) == (send.context.trace_id, send.context.span_id)
        assert send.attributes["amqwire.producer.attempts"] == 1
        assert send.end_time >= send.start_time


def test_a_trace_goes_through_the_bridge_into_a_consumer(amqp_url, names, traced):
    """publisher (send) -> queue A -> bridge (one send span per message, a child of the
    publisher's) -> queue B -> consumer (process, a child of the publisher's span: the bridge
    passes the header on unchanged).  One trace."""
    from amqwire.bridge import Bridge

    provider, exporter = traced
    source, destination = names.queue(), names.queue()
    count = 5
    with connect(amqp_url) as conn:
        ch = conn.channel()
        ch.queue_declare(source)
        ch.queue_declare(destination)

    async def scenario():
        async with aio.connect(amqp_url, tracing=provider) as conn:
            ch = await conn.channel()
            for i in range(count):
                await ch.basic_publish("", source, b"b%d" % i)
            bridge = Bridge(amqp_url, source, amqp_url, dest_routing_key=destination, tracing=provider,
                            management_port=None)
            async with bridge:
                received = []
                async with ch.consume(destination, no_ack=True) as consumer:
                    async for message in consumer:
                        received.append(message)
                        if len(received) == count:
                            break
        return received

    received = asyncio.run(asyncio.wait_for(scenario(), 60))
    spans = exporter.get_finished_spans()
    publishes = [s for s in spans if s.name == f"send {source}" and s.attributes["messaging.operation.name"] == "send"]
    forwards = [s for s in spans if s.attributes.get("messaging.operation.name") == "forward"]
    processes = spans_named(exporter, f"process {destination}")
    assert len(publishes) == count and len(forwards) == count and len(processes) == count
    by_body = {}
    for send in publishes:
        by_body.setdefault(send.context.trace_id, send)
    assert len(by_body) == count  # one trace per message
    for message in received:
        trace_id, span_id = header_ids(message)
        send = by_body[trace_id]
        assert span_id == send.context.span_id  # the header arrived unchanged
        forward = only([f for f in forwards if f.context.trace_id == trace_id], "the bridge's span")
        assert forward.kind is SpanKind.PRODUCER and forward.name == f"send {destination}"
        assert forward.attributes["messaging.source.name"] == source
        assert forward.parent.span_id == send.context.span_id
        process = only([p for p in processes if p.context.trace_id == trace_id], "the consumer's span")
        check_child(process, send, "process", destination)


def test_tracing_off_imports_nothing_of_opentelemetry_and_leaves_headers_alone(amqp_url, names):
    queue = names.queue()
    code = textwrap.dedent(f"""
        import sys
        from amqwire.client import BasicProperties, connect, Producer
        from amqwire.bridge import Bridge
        with connect({amqp_url!r}) as conn:
            ch = conn.channel()
            ch.queue_declare({queue!r})
            ch.basic_publish("", {queue!r}, b"x")
            ch.basic_publish("", {queue!r}, b"y", BasicProperties(headers={{"a": "b"}}))
            with Producer({amqp_url!r}, message_ids=False) as producer:
                producer.send("", {queue!r}, b"z")
            got = [ch.basic_get({queue!r}, no_ack=True) for _ in range(3)]
        print([m.properties.headers for m in got])
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    headers, modules = out.stdout.splitlines()
    assert headers == "[None, {'a': 'b'}, None]"
    assert modules == "[]"


def test_tracing_without_opentelemetry_is_a_typed_error_and_bad_options_are_refused():
    code = textwrap.dedent("""
        import sys
        sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
        from amqwire.client import connect
        from amqwire.client.tracing import TracingUnavailable
        try:
            connect("amqp://127.0.0.1:1/", tracing=True)
        except TracingUnavailable as exc:
            print(type(exc).__mro__[1].__name__, isinstance(exc, ImportError), exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("AMQPError True tracing needs opentelemetry-api"), out.stdout
    with pytest.raises(TypeError, match="tracing must be True, False, a Tracing or a TracerProvider"):
        tracing_from_option("yes")
    assert tracing_from_option(False) is None
    tracing = Tracing()
    assert tracing_from_option(tracing) is tracing
    assert issubclass(TracingUnavailable, ImportError)


@pytest.mark.timeout(300)  # when it is the run's first Spark test, it waits for the JVM: minutes on a loaded machine
def test_spark_sink_takes_the_trace_context_from_a_column(spark, amqp_url, names):
    import amqwire.spark
    from pyspark.sql import functions as F

    amqwire.spark.register(spark)
    queue = names.queue()
    with connect(amqp_url) as conn:
        conn.channel().queue_declare(queue)
    parents = ["00-%032x-%016x-01" % (i + 1, i + 17) for i in range(3)]
    rows = [("r0", parents[0], {"k": "v"}), ("r1", None, {"k": "w"}), ("r2", parents[2], None),
            ("r3", parents[1], {"traceparent": "00-old-old-00"})]
    df = spark.createDataFrame(rows, "body string, tp string, headers map<string,string>").coalesce(1)
    (df.write.format("amqp").mode("append").option("url", amqp_url).option("routing_key", queue)
       .option("traceparentColumn", "tp").save())
    with connect(amqp_url) as conn:
        ch = conn.channel()
        got = {m.body: m.properties.headers for m in (ch.basic_get(queue, no_ack=True) for _ in range(4))}
    assert got[b"r0"] == {"k": "v", "traceparent": parents[0]}
    assert got[b"r1"] == {"k": "w"}  # a null context: the row as it was
    assert got[b"r2"] == {"traceparent": parents[2]}
    assert got[b"r3"] == {"traceparent": parents[1]}  # the column's wins
    with pytest.raises(Exception, match="traceparentColumn: the column must be a string"):
        (df.select("body", F.lit(1).alias("tp")).write.format("amqp").mode("append").option("url", amqp_url)
           .option("routing_key", queue).option("traceparentColumn", "tp").save())
    only_context = spark.createDataFrame([("a", parents[0])], "body string, tp string")
    (only_context.write.format("amqp").mode("append").option("url", amqp_url).option("routing_key", queue)
       .option("traceparentColumn", "tp").save())
    with connect(amqp_url) as conn:
        assert conn.channel().basic_get(queue, no_ack=True).properties.headers == {"traceparent": parents[0]}



def test_a_send_refused_at_the_call_ends_its_span_with_the_error(amqp_url, names, traced):
    from amqwire.client import BufferFullError

    provider, exporter = traced
    queue = names.queue()
    with connect(amqp_url) as conn:
        conn.channel().queue_declare(queue)
    # linger: the first send waits in the producer's queue, holding the whole buffer
    with Producer(amqp_url, tracing=provider, buffer_memory=100, buffer_full="raise", linger=30,
                  batch_size=1000) as producer:
        first = producer.send_async("", queue, b"x" * 80)
        with pytest.raises(BufferFullError):
            producer.send_async("", queue, b"y" * 80)
        refused = only(spans_named(exporter, "send "), "the spans ended so far")
        assert refused.status.status_code is StatusCode.ERROR
        assert refused.attributes["error.type"] == "BufferFullError"
        producer.flush(30)
        first.result(30)
    assert len(spans_named(exporter, "send ")) == 2
