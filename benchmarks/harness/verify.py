"""Result verification shared by the suites: a failed check fails its case
(shown as FAILED in the table) and makes the exit status non-zero."""

from __future__ import annotations

from typing import Any


class CaseFailed(Exception):
    """A case could not be measured, or its result failed verification."""


class VerificationError(AssertionError):
    """A repetition computed a wrong result."""


def check(condition: bool, message: str) -> None:
    """:raises VerificationError: with ``message`` unless ``condition``."""
    if not condition:
        raise VerificationError(message)


def verify_counts(client: dict[str, Any], server: dict[str, Any], *, clients: int, nrepeats: int) -> None:
    """Check the echo processes' JSON (as ``benchmarks.impls`` prints it):
    the client checked every echo and made both full compares per
    connection, the server echoed exactly what was sent, and every repeat
    was measured.

    :raises CaseFailed: naming every disagreement.
    """
    problems = []
    if client["verified_messages"] != client["messages_sent"]:
        problems.append(f"checked {client['verified_messages']} of {client['messages_sent']} echoes")
    if client["full_compares"] != 2 * clients:
        problems.append(f"{client['full_compares']} full compares, expected {2 * clients}")
    if server["messages"] != client["messages_sent"]:
        problems.append(f"server echoed {server['messages']} messages, client sent {client['messages_sent']}")
    if len(client["repeats"]) != nrepeats:
        problems.append(f"{len(client['repeats'])} repeats, expected {nrepeats}")
    if problems:
        raise CaseFailed("verification: " + "; ".join(problems))
