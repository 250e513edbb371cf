# Celery has no type annotations.
# mypy: disable-error-code="misc,no-untyped-call,untyped-decorator"
"""The Celery app the worker tests run (``celery -A tests.amqp_kombu.celery_app worker``): its
broker is ``CELERY_TEST_BROKER`` (an ``amqp-sansio://`` URL), results go through the rpc
backend, and ``record`` appends each task's number to ``CELERY_TEST_RECORD`` (the kill -9 test
counts what ran there)."""

from __future__ import annotations

import os

from celery import Celery

import amqp_kombu  # registers amqp-sansio://

assert amqp_kombu.SCHEMES

app = Celery("celery_app")
app.conf.update(
    broker_url=os.environ.get("CELERY_TEST_BROKER", "amqp-sansio://guest:guest@127.0.0.1//"),
    broker_transport_options={
        "confirm_publish": True,
        "protocol": os.environ.get("CELERY_TEST_PROTOCOL", "0-9-1"),
    },
    result_backend="rpc://",
    task_default_queue=os.environ.get("CELERY_TEST_QUEUE", "celery"),
    worker_prefetch_multiplier=4,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    # One worker per test: no need to wait for others on start.
    worker_enable_remote_control=True,
)


@app.task
def add(x: int, y: int) -> int:
    return x + y


class Unlucky(Exception):
    """What ``fail`` raises."""


@app.task
def fail(text: str) -> None:
    raise Unlucky(text)


@app.task(bind=True, max_retries=3, default_retry_delay=0)
def flaky(self: object, attempts_to_fail: int) -> int:
    """Fails (and retries) its first *attempts_to_fail* runs; returns the retries it took."""
    retries: int = self.request.retries  # type: ignore[attr-defined]
    if retries < attempts_to_fail:
        raise self.retry(countdown=0)  # type: ignore[attr-defined]
    return retries


@app.task(acks_late=True)
def record(number: int) -> None:
    """Append *number* to the record file (one short line: an O_APPEND write is atomic)."""
    fd = os.open(os.environ["CELERY_TEST_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, b"%d\n" % number)
    finally:
        os.close(fd)
