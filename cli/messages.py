"""publish, get, consume, declare-queue, delete-queue, purge: the rabbitmq-c tools' jobs.

A body comes from ``--body``, ``--file`` or stdin; properties and headers are options.
Bodies are written to stdout as they are, one per line (``--json``: one JSON object per
message, with its properties, headers and the exact body).  Publishes are confirmed: the command returns
once the broker has the message, or fails; a message no queue took is said on stderr (an
error with ``--mandatory``).  A queue that does not exist is an error (exit 1) for every
subcommand that names one.
"""
from __future__ import annotations

import argparse
import base64
import datetime
import json
import re
import sys
from typing import Any, BinaryIO, Optional

from amqwire.client import BasicProperties, Channel, Message, MessageReturned, PreconditionFailed, connect

from .settings import PROG, Settings, UsageError, int_range, non_negative_int, positive_float, positive_int

QUEUE_TYPES = ("classic", "quorum", "stream")


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    publish = commands.add_parser("publish", parents=[common], help="publish one message",
                                  description="Publish one message and wait for the broker's confirm. "
                                  "The body comes from --body, --file, or else stdin.")
    publish.add_argument("-e", "--exchange", default="", help="exchange (default: the default exchange)")
    publish.add_argument("-r", "--routing-key", default="", metavar="KEY",
                         help="routing key (with the default exchange: the queue's name)")
    body = publish.add_mutually_exclusive_group()
    body.add_argument("-b", "--body", help="the body, as UTF-8 text")
    body.add_argument("-f", "--file", metavar="PATH", help="read the body from this file ('-': stdin)")
    publish.add_argument("--mandatory", action="store_true",
                         help="fail (exit 1) if no queue receives the message (default: a warning on stderr, exit 0)")
    publish.add_argument("-p", "--persistent", action="store_true", help="delivery mode 2 (written to disk)")
    publish.add_argument("-H", "--header", action="append", default=[], metavar="NAME=VALUE",
                         help="a header, text unless --header-json; repeatable")
    publish.add_argument("--header-json", action="append", default=[], metavar="NAME=JSON",
                         help="a header whose value is JSON (number, boolean, list, object); repeatable")
    for name in ("content-type", "content-encoding", "correlation-id", "reply-to", "expiration", "message-id",
                 "type", "user-id", "app-id"):
        publish.add_argument(f"--{name}", metavar="TEXT")
    publish.add_argument("--priority", type=int_range(0, 255), metavar="0-255")
    publish.add_argument("--timestamp", type=_timestamp, metavar="SECONDS|now",
                         help="timestamp property: seconds since the epoch, or 'now'")
    publish.add_argument("--timeout", type=positive_float, default=30.0, metavar="SECONDS",
                         help="give up waiting for the confirm after this long (default: 30)")
    publish.set_defaults(handler=run_publish)

    get = commands.add_parser("get", parents=[common], help="take messages from a queue (basic.get)",
                              description="Take up to --count messages from a queue, one basic.get each; "
                              "stops early when the queue is empty.")
    get.add_argument("queue")
    get.add_argument("-n", "--count", type=positive_int, default=1, help="at most this many messages (default: 1)")
    _add_output_options(get)
    get.add_argument("--requeue", action="store_true",
                     help="put the messages back once written (a peek on a classic queue; they come back "
                     "marked redelivered); refused on a quorum queue, where it is no peek, unless --force")
    get.add_argument("--force", action="store_true",
                     help="--requeue on a quorum queue all the same: it raises each message's delivery count "
                     "(which its delivery-limit counts) and may change the order")
    get.set_defaults(handler=run_get)

    consume = commands.add_parser("consume", parents=[common], help="subscribe to a queue and print what arrives",
                                  description="Subscribe to a queue and write each message to stdout, until "
                                  "--count messages, --idle-timeout seconds without one, or Ctrl-C.")
    consume.add_argument("queue")
    consume.add_argument("-n", "--count", type=positive_int, help="stop after this many messages")
    consume.add_argument("--idle-timeout", type=positive_float, metavar="SECONDS",
                         help="stop once no message has come for this long")
    consume.add_argument("-q", "--prefetch", type=non_negative_int, default=100,
                         help="unacknowledged messages the broker sends ahead (default: 100; 0: no limit)")
    _add_output_options(consume)
    consume.set_defaults(handler=run_consume)

    declare = commands.add_parser("declare-queue", parents=[common], help="declare a queue, print its name",
                                  description="Declare a queue (an empty name: the broker names it) and print its name.")
    declare.add_argument("queue", nargs="?", default="")
    declare.add_argument("-d", "--durable", action="store_true", help="survives a broker restart "
                         "(implied by --type quorum or stream)")
    declare.add_argument("-t", "--type", choices=QUEUE_TYPES, help="x-queue-type (default: the broker's)")
    declare.add_argument("--auto-delete", action="store_true", help="deleted when its last consumer leaves")
    declare.add_argument("-a", "--argument", action="append", default=[], metavar="NAME=VALUE",
                         help="a queue argument, its value JSON when it parses (x-max-length=1000), "
                         "else text; repeatable")
    declare.add_argument("--passive", action="store_true", help="only check that it exists")
    declare.set_defaults(handler=run_declare_queue)

    delete = commands.add_parser("delete-queue", parents=[common], help="delete a queue, print how many messages it held",
                                 description="Delete a queue and print how many messages it held; "
                                 "a queue that does not exist is an error (exit 1).")
    delete.add_argument("queue")
    delete.add_argument("--if-unused", action="store_true", help="only if it has no consumers")
    delete.add_argument("--if-empty", action="store_true", help="only if it holds no messages")
    delete.set_defaults(handler=run_delete_queue)

    purge = commands.add_parser("purge", parents=[common], help="remove a queue's ready messages, print how many")
    purge.add_argument("queue")
    purge.set_defaults(handler=run_purge)


def _add_output_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("-j", "--json", action="store_true",
                         help="one JSON object per message: body, properties, headers, routing")
    command.add_argument("--no-ack", dest="ack", action="store_false",
                         help="the broker forgets each message as it sends it (default: acked once written)")


def _timestamp(text: str) -> datetime.datetime:
    if text == "now":
        return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    try:
        return datetime.datetime.fromtimestamp(int(text), datetime.timezone.utc)
    except (ValueError, OverflowError, OSError):
        raise argparse.ArgumentTypeError(f"not whole seconds since the epoch: {text!r}") from None


def _name_value(text: str, what: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise UsageError(f"{what} must be NAME=VALUE, not {text!r}")
    return name, value


# publish -------------------------------------------------------------------------------------

def message_properties(args: argparse.Namespace) -> BasicProperties:
    headers: dict[str, Any] = {}
    for item in args.header:
        name, value = _name_value(item, "--header")
        headers[name] = value
    for item in args.header_json:
        name, value = _name_value(item, "--header-json")
        try:
            headers[name] = json.loads(value)
        except ValueError:
            raise UsageError(f"--header-json {name}: not JSON: {value!r}") from None
    return BasicProperties(
        content_type=args.content_type,
        content_encoding=args.content_encoding,
        headers=headers or None,
        delivery_mode=2 if args.persistent else None,
        priority=args.priority,
        correlation_id=args.correlation_id,
        reply_to=args.reply_to,
        expiration=args.expiration,
        message_id=args.message_id,
        timestamp=args.timestamp,
        type=args.type,
        user_id=args.user_id,
        app_id=args.app_id,
    )


def message_body(args: argparse.Namespace, stdin: BinaryIO) -> bytes:
    if args.body is not None:
        return str(args.body).encode("utf-8", "surrogateescape")
    if args.file is not None and args.file != "-":
        try:
            with open(args.file, "rb") as file:
                return file.read()
        except OSError as exc:
            raise UsageError(f"cannot read the body file {args.file}: {exc.strerror}") from None
    return stdin.read()


def run_publish(args: argparse.Namespace, settings: Settings) -> int:
    properties = message_properties(args)
    body = message_body(args, sys.stdin.buffer)
    with connect(settings.parameters) as connection:
        channel = connection.channel()
        channel.confirm_select()
        # Always mandatory, so that the broker says when no queue took the message (without
        # the flag it drops it and confirms all the same); --mandatory makes that an error.
        try:
            channel.basic_publish(args.exchange, args.routing_key, body, properties, mandatory=True, timeout=args.timeout)
        except MessageReturned as returned:
            if args.mandatory:
                raise
            sys.stderr.write(f"{PROG}: warning: no queue received the message: {returned.reply_code} {returned.reply_text} "
                             f"(exchange {returned.exchange!r}, routing key {returned.routing_key!r}); "
                             "the broker dropped it (--mandatory: exit 1)\n")
    return 0


# get and consume -----------------------------------------------------------------------------

def as_json(message: Message) -> dict[str, Any]:
    """A message as JSON: the body as text when it is UTF-8, else base64 (``body_base64``)."""
    record: dict[str, Any] = {
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "redelivered": message.redelivered,
    }
    if message.message_count is not None:
        record["message_count"] = message.message_count
    properties = {name: value for name, value in message.properties.as_dict().items() if value is not None}
    headers = properties.pop("headers", None)
    record["properties"] = properties
    record["headers"] = headers or {}
    try:
        record["body"] = bytes(message.body).decode("utf-8")
    except UnicodeDecodeError:
        record["body_base64"] = base64.b64encode(bytes(message.body)).decode("ascii")
    return record


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(data).decode("ascii")
    return str(value)  # Decimal and other table values


class MessageWriter:
    """Writes messages to stdout: the body and a newline (unless it ends with one), or a
    JSON line (the exact body)."""

    def __init__(self, args: argparse.Namespace, out: BinaryIO) -> None:
        self.json = bool(args.json)
        self.out = out

    def write(self, message: Message) -> None:
        if self.json:
            line = json.dumps(as_json(message), default=_json_default, ensure_ascii=False)
            self.out.write(line.encode("utf-8") + b"\n")
        else:
            body = bytes(message.body)
            # a line each: text published with `echo` already ends with its newline
            self.out.write(body if body.endswith(b"\n") else body + b"\n")
        self.out.flush()


def queue_type(connection: Any, queue: str) -> Optional[str]:
    """``classic``, ``quorum`` or ``stream`` as the broker names the queue's type; None when
    it does not say.  AMQP 0-9-1 has no call that tells: a consumer with ``x-stream-offset``
    (an argument only streams accept) is refused by any other queue with 406 "... of queue
    type rabbit_quorum_queue", which names it, and creates nothing.  On a throwaway
    channel, which the refusal closes; a stream accepts it only with a prefetch, which this
    channel has not, so nothing is consumed there either."""
    channel = connection.channel()
    try:
        consumer = channel.basic_consume(queue, no_ack=False, arguments={"x-stream-offset": "next"})
    except PreconditionFailed as refused:
        match = re.search(r"of queue type rabbit_(\w+)_queue", refused.reply_text)
        return match.group(1) if match else None
    consumer.cancel()  # a broker that took it: a stream
    channel.close()
    return "stream"


def run_get(args: argparse.Namespace, settings: Settings) -> int:
    writer = MessageWriter(args, sys.stdout.buffer)
    no_ack = not args.ack and not args.requeue
    with connect(settings.parameters) as connection:
        channel = connection.channel()
        channel.queue_declare(args.queue, passive=True)  # missing: NOT_FOUND, exit 1
        if args.requeue and not args.force and queue_type(connection, args.queue) == "quorum":
            raise UsageError(f"--requeue is no peek on quorum queue {args.queue!r}: each message would come back "
                             "with its delivery count raised (a delivery-limit drops or dead-letters it) and "
                             "possibly out of order; --force to do it all the same")
        peeked: list[Message] = []
        for _ in range(args.count):
            message = channel.basic_get(args.queue, no_ack=no_ack)
            if message is None:
                break
            writer.write(message)  # acked only once written
            if args.requeue:
                peeked.append(message)  # put back at the end, or the next get would take it again
            elif not no_ack:
                message.ack()
        for message in peeked:
            message.nack(requeue=True)
    return 0


def run_consume(args: argparse.Namespace, settings: Settings) -> int:
    writer = MessageWriter(args, sys.stdout.buffer)
    received = 0
    with connect(settings.parameters) as connection:
        channel: Channel = connection.channel()
        if args.ack and args.prefetch:
            channel.basic_qos(args.prefetch)
        consumer = channel.consume(args.queue, no_ack=not args.ack)
        while args.count is None or received < args.count:
            message: Optional[Message] = consumer.get(timeout=args.idle_timeout)
            if message is None:
                break
            writer.write(message)  # acked only once written
            if args.ack:
                message.ack()
            received += 1
        consumer.cancel()
    return 0


# queues --------------------------------------------------------------------------------------

def queue_arguments(items: list[str], queue_type: Optional[str]) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for item in items:
        name, text = _name_value(item, "--argument")
        try:
            arguments[name] = json.loads(text)
        except ValueError:
            arguments[name] = text
    if queue_type is not None:
        arguments["x-queue-type"] = queue_type
    return arguments


def run_declare_queue(args: argparse.Namespace, settings: Settings) -> int:
    arguments = queue_arguments(args.argument, args.type)
    durable = args.durable or args.type in ("quorum", "stream")
    with connect(settings.parameters) as connection:
        channel = connection.channel()
        reply = channel.queue_declare(args.queue, passive=args.passive, durable=durable,
                                      auto_delete=args.auto_delete, arguments=arguments or None)
    sys.stdout.write(f"{reply.queue}\n")
    return 0


def run_delete_queue(args: argparse.Namespace, settings: Settings) -> int:
    with connect(settings.parameters) as connection:
        channel = connection.channel()
        # RabbitMQ answers the delete of a missing queue as done, with 0 messages
        channel.queue_declare(args.queue, passive=True)  # missing: NOT_FOUND, exit 1
        held = channel.queue_delete(args.queue, if_unused=args.if_unused, if_empty=args.if_empty)
    sys.stdout.write(f"{held}\n")
    return 0


def run_purge(args: argparse.Namespace, settings: Settings) -> int:
    with connect(settings.parameters) as connection:
        purged = connection.channel().queue_purge(args.queue)
    sys.stdout.write(f"{purged}\n")
    return 0
