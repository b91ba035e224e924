"""encode_publish_iov's pieces go through a real socket.sendmsg and parse on the other end."""
import socket
import threading

from amqwire.codec import BasicProperties, CommandParser, encode_publish, encode_publish_iov


def send_all(sock, pieces):
    views = [memoryview(p).cast("B") for p in pieces]
    while views:
        sent = sock.sendmsg(views[:64])          # IOV_MAX is at least 1024; stay modest
        while sent:
            if sent >= len(views[0]):
                sent -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


def test_zero_copy_publish_over_a_socketpair():
    body = bytes(range(256)) * 8192                     # 2 MiB
    props = BasicProperties(content_type="application/octet-stream", delivery_mode=2)
    pieces = encode_publish_iov(3, "ex", "rk", body, props, frame_max=131072)
    assert any(isinstance(p, memoryview) for p in pieces)
    left, right = socket.socketpair()
    received = bytearray()
    reader = threading.Thread(daemon=True, target=lambda: [received.extend(chunk) for chunk in iter(
        lambda: right.recv(65536), b"")])
    reader.start()
    try:
        send_all(left, pieces)
    finally:
        left.close()
        reader.join(timeout=30)
        right.close()
    assert not reader.is_alive(), "timed out after 30 s waiting for the reader to see the end of the stream"
    assert bytes(received) == encode_publish(3, "ex", "rk", body, props, frame_max=131072)
    [command] = CommandParser(frame_max=131072).feed(received)
    assert command.channel == 3 and command.method.routing_key == "rk"
    assert command.properties == props and command.body == body
