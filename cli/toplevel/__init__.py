"""amqwire: an AMQP 0-9-1 (RabbitMQ) toolkit built on a wire codec written in Cython.

The parts are subpackages, each imported on its own: ``amqwire.codec`` (frames, methods,
tables, properties, parsers), ``amqwire.client`` (blocking and asyncio connections, the
Producer), ``amqwire.bridge`` (broker-to-broker forwarding), ``amqwire.spark`` (the "amqp"
Spark data source and column functions) and ``amqwire.cli`` (the ``amqwire`` command).

This module imports none of them.  It exists so that ``amqwire`` is a regular package: a
folder named ``amqwire`` on ``sys.path`` (a checkout of this repository, used from its
parent folder) is then only a namespace portion, which Python's import system passes over
for the installed package, instead of merging with it and shadowing the compiled modules.
"""
