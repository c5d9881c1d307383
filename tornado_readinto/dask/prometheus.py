"""The switched comms' figures on dask's ``/metrics``: a
``prometheus_client`` collector, registered in the process's global registry
by the switch's preload when ``prometheus_client`` is importable (the
``prometheus`` extra).  Every scheduler and worker serves that registry at
``/metrics`` on its dashboard port, so the figures appear there with no
change to dask.

The collector has no thread and holds no value: a scrape calls `collect`,
which reads `tornado_readinto.dask.metrics.snapshot`.

=====================================================  =======  ================================================
metric                                                 type     meaning
=====================================================  =======  ================================================
``tornado_readinto_info``                              info     ``version``, ``build`` (compiled, pure)
``tornado_readinto_comms_opened_total``                counter  switched comms made (connected or accepted)
``tornado_readinto_comms_open``                        gauge    switched comms open now
``tornado_readinto_messages_received_total``           counter  messages read whole
``tornado_readinto_messages_sent_total``               counter  messages queued whole for sending
``tornado_readinto_received_bytes_total``              counter  bytes received, headers included
``tornado_readinto_sent_bytes_total``                  counter  bytes sent, headers included
``tornado_readinto_receive_calls_total``               counter  receive calls (bytes per call: the ratio)
``tornado_readinto_received_in_place_bytes_total``     counter  of those bytes, the ones received straight into
                                                                their frames (the copies avoided)
``tornado_readinto_refused_messages_total``            counter  messages refused, by ``reason`` (the limit, or
                                                                ``malformed``)
``tornado_readinto_allocator_hits_total``              counter  frames whose buffer the recycling allocator reused
``tornado_readinto_allocator_misses_total``            counter  frames it had to map a new buffer for
``tornado_readinto_allocator_retained_bytes``          gauge    bytes of free buffers it keeps
=====================================================  =======  ================================================

.. versionadded:: 0.1
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .metrics import snapshot

__all__ = ["ReadIntoCollector", "register"]

#: ``name``, ``type``, ``help``, the snapshot's key.
_METRICS = (
    ("comms_opened", "counter", "Switched comms made (connected or accepted).", "comms_opened"),
    ("comms_open", "gauge", "Switched comms open now.", "comms_open"),
    ("messages_received", "counter", "Messages read whole by the switched comms.", "messages_received"),
    ("messages_sent", "counter", "Messages queued whole for sending by the switched comms.", "messages_sent"),
    ("received_bytes", "counter", "Bytes received by the switched comms, headers included.", "nbytes_received"),
    ("sent_bytes", "counter", "Bytes sent by the switched comms, headers included.", "nbytes_sent"),
    ("receive_calls", "counter", "Receive calls of the switched comms' streams.", "receive_calls"),
    ("received_in_place_bytes", "counter", "Bytes the switched comms received straight into their frames.",
     "nbytes_received_in_place"),
    ("allocator_hits", "counter", "Frames whose buffer the recycling allocator reused.", "allocator_hits"),
    ("allocator_misses", "counter", "Frames the recycling allocator mapped a new buffer for.", "allocator_misses"),
    ("allocator_retained_bytes", "gauge", "Bytes of free buffers the recycling allocator keeps.",
     "allocator_retained_nbytes"),
)  # fmt: skip


class ReadIntoCollector:
    """The collector: each scrape reads the figures once (`collect`)."""

    def collect(self) -> Iterator[Any]:
        """The metric families of the figures now."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        import tornado_readinto

        figures = snapshot()
        build = "compiled" if tornado_readinto.COMPILED else "pure"
        yield InfoMetricFamily(
            "tornado_readinto",
            "The tornado_readinto package serving this process's switched comms.",
            value={"version": tornado_readinto.__version__, "build": build},
        )
        for name, kind, help_text, key in _METRICS:
            family = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            yield family(f"tornado_readinto_{name}", help_text, value=figures[key])
        refused = CounterMetricFamily(
            "tornado_readinto_refused_messages",
            "Messages refused by a frame limit or malformed, by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(figures["refused"].items()):
            refused.add_metric([reason], count)
        yield refused


_registered: list[ReadIntoCollector] = []


def register(registry: Any = None) -> bool:
    """Register `ReadIntoCollector` in ``registry`` (default: the global
    registry, which dask's ``/metrics`` serves) once per process; True if it
    is registered (now or before), False without ``prometheus_client``."""
    if _registered:
        return True
    try:
        from prometheus_client import REGISTRY
    except ImportError:
        return False
    collector = ReadIntoCollector()
    (REGISTRY if registry is None else registry).register(collector)
    _registered.append(collector)
    return True
