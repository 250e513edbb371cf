"""The client layer: everything the client adapters (``amqp_trio``, ``amqp_asyncio``,
``amqp_blocking``) share without doing any I/O.

For users: OpenTelemetry tracing and metrics for all three adapters (:func:`instrument`; see
``docs/tracing.md``), connection parameters and AMQP URLs, the exception classes every adapter
raises, the :class:`Message` they hand out, and the publisher-confirm outcomes. For adapters: the
:class:`Router` that turns the core's events into replies, deliveries and confirms (an adapter
supplies its waiters and sinks through the :class:`Waiter`, :class:`ConsumerSink`,
:class:`ConfirmSink` and :class:`ReturnSink` protocols), the counting behind pipelined publishers,
and the channel API declared once: :data:`REQUESTS`, from which ``tools/gen_channels.py``
generates each adapter's channel methods.

The names every adapter re-exports at its top level are listed once, in
:mod:`amqp_sansio.client.exports`.
"""

from __future__ import annotations

from .._util import fix_module_names
from . import exports
from ._confirms import (
    ConfirmTracker,
    PublisherCounts,
    PublishOutcome,
    PublishTicketState,
)
from ._credentials import (
    DEFAULT_REFRESH_MARGIN,
    AsyncCredentialsProvider,
    CredentialsProvider,
    check_refresh_margin,
    refresh_delay,
)
from ._errors import CloseReason, error_for_close, error_from
from ._guards import ConsumeBlock, PublisherBlock, connect_failed
from ._instrument import (
    SEMCONV_VERSION,
    Processing,
    Receiving,
    Settling,
    Telemetry,
    connection_telemetry,
    instrument,
    is_instrumented,
    uninstrument,
)
from ._message import AsyncMessage, AsyncSettler, Message, bound_message
from ._params import DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_URL, AuthMechanism, redact_url
from ._recovery import (
    Epoch,
    RecoveryEvent,
    RecoveryPlan,
    RecoveryStep,
    TopologyRestorer,
    check_settle,
)
from ._reports import report_closed_by_broker, report_lost, report_protocol_error
from ._requests import (
    DEFAULT_CONSUMER_BUFFER,
    ENDPOINT_ERRORS,
    REQUESTS,
    EndpointResolver,
    Endpoints,
    Param,
    Request,
    check_window,
    connection_parameters,
    consumer_buffer_size,
    consumer_tag,
    declared_queue,
    endpoint_parameters,
    flow_state,
    got_message,
    message_count,
    report_dropped,
)
from ._router import (
    ChannelBook,
    ConfirmSink,
    ConsumerSink,
    Reply,
    ReturnCallback,
    ReturnHandler,
    ReturnSink,
    Router,
    Waiter,
    end_suspended,
    return_sink,
)
from ._supervisor import (
    ChannelRestoration,
    Connect,
    GiveUp,
    LostChannels,
    LostConnection,
    RecoveryAction,
    RecoverySupervisor,
    Restoration,
    Resume,
    Wait,
)
from ._versions import (
    ADAPTER_VERSIONS,
    USE_0_10,
    ClientProtocol,
    ProtocolFallback,
    client_protocol,
    wants_0_10,
)
from .exports import *  # noqa: F403  (the exceptions and ConnectionParameters)

__all__ = [
    "ADAPTER_VERSIONS",
    "DEFAULT_CONSUMER_BUFFER",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "DEFAULT_REFRESH_MARGIN",
    "DEFAULT_URL",
    "ENDPOINT_ERRORS",
    "REQUESTS",
    "SEMCONV_VERSION",
    "USE_0_10",
    "AsyncCredentialsProvider",
    "AsyncMessage",
    "AsyncSettler",
    "AuthMechanism",
    "ChannelBook",
    "ChannelRestoration",
    "ClientProtocol",
    "CloseReason",
    "ConfirmSink",
    "ConfirmTracker",
    "Connect",
    "ConsumeBlock",
    "ConsumerSink",
    "CredentialsProvider",
    "EndpointResolver",
    "Endpoints",
    "Epoch",
    "GiveUp",
    "LostChannels",
    "LostConnection",
    "Message",
    "Param",
    "Processing",
    "ProtocolFallback",
    "PublishOutcome",
    "PublishTicketState",
    "PublisherBlock",
    "PublisherCounts",
    "Receiving",
    "RecoveryAction",
    "RecoveryEvent",
    "RecoveryPlan",
    "RecoveryStep",
    "RecoverySupervisor",
    "Reply",
    "Request",
    "Restoration",
    "Resume",
    "ReturnCallback",
    "ReturnHandler",
    "ReturnSink",
    "Router",
    "Settling",
    "Telemetry",
    "TopologyRestorer",
    "Wait",
    "Waiter",
    "bound_message",
    "check_refresh_margin",
    "check_settle",
    "check_window",
    "client_protocol",
    "connect_failed",
    "connection_parameters",
    "connection_telemetry",
    "consumer_buffer_size",
    "consumer_tag",
    "declared_queue",
    "end_suspended",
    "endpoint_parameters",
    "error_for_close",
    "error_from",
    "flow_state",
    "got_message",
    "instrument",
    "is_instrumented",
    "message_count",
    "redact_url",
    "refresh_delay",
    "report_closed_by_broker",
    "report_dropped",
    "report_lost",
    "report_protocol_error",
    "return_sink",
    "uninstrument",
    "wants_0_10",
]
__all__ += exports.__all__

fix_module_names(__name__, globals(), __all__)
