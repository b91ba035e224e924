"""amqwire.spark: PySpark integration (placeholder during bring-up)."""
