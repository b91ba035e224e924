"""amqwire.client.stream: a client of RabbitMQ's stream protocol, blocking and asyncio."""
