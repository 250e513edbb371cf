"""Generated AMQP 0-10 tables (tools/gen_spec.py)."""
