# Celery has no type annotations.
# mypy: disable-error-code="misc,no-untyped-call,untyped-decorator"
"""A Celery app on amqp-sansio's kombu transport (see docs/kombu.md).

Run a worker, then call a task from another shell::

    celery -A examples.celery_app worker -P threads -c 4 --loglevel=INFO
    python -m examples.celery_app          # sends add(2, 2) and prints 4

``BROKER_URL`` picks the broker (default: RabbitMQ on 127.0.0.1); ``amqp-broker`` (the
embedded broker) works too: ``amqp-broker --port 5673`` and
``BROKER_URL=amqp-sansio://guest:guest@127.0.0.1:5673//``.
"""

from __future__ import annotations

import os

from celery import Celery

import amqp_kombu  # registers the amqp-sansio:// scheme with kombu

assert amqp_kombu.SCHEMES

app = Celery("example")
app.conf.update(
    broker_url=os.environ.get("BROKER_URL", "amqp-sansio://guest:guest@127.0.0.1//"),
    # publisher confirms: a task message the broker refused raises in apply_async
    broker_transport_options={"confirm_publish": True},
    result_backend="rpc://",
    task_acks_late=True,  # a task killed half way runs again
    broker_connection_retry_on_startup=True,
)


@app.task
def add(x: int, y: int) -> int:
    return x + y


if __name__ == "__main__":
    print(add.delay(2, 2).get(timeout=30))
