"""amqwire.codec.stream: RabbitMQ's stream protocol (port 5552), compiled with Cython.

Frames and commands, the chunks a deliver carries, and the AMQP 1.0 message format the
stream protocol's messages are written in.  Bytes in, bytes out, no I/O.
"""
