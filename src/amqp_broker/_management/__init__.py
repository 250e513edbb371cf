"""The management HTTP API (RabbitMQ 3.10's ``rabbitmq_management`` subset) and ``/metrics``
(``rabbitmq_prometheus``'s aggregated names), served on the broker's own Trio loop so every
request reads and changes the model on its thread, between two AMQP frames."""

from __future__ import annotations

from ._api import ManagementApi, Response
from ._http import serve_management

__all__ = ["ManagementApi", "Response", "serve_management"]
