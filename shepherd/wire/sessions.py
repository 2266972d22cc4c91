"""What both servers (the learning server and the deploy server) refuse a session's request with, and the one
``seq`` rule of retries they share: the same ``seq`` with the same step is a retry (its answer again, recorded
once), with another step a conflict; a lower ``seq`` is refused; a higher one is the next step."""

from __future__ import annotations

from typing import Callable


class Unauthorized(PermissionError):
    """An unknown or revoked API key, or an unknown or expired session key."""


class Conflict(RuntimeError):
    """The request clashes with the session's state (a step while another is in flight, a stale seq)."""


class TooManySessions(RuntimeError):
    """The agent (or the deploy server) has as many sessions as it may have; ``retry_after`` is in seconds."""

    retry_after = 5


def is_retry(seq: int | None, last_seq: int | None, same_step: Callable[[], bool]) -> bool:
    """Whether a step with ``seq`` repeats the session's last step (``last_seq``), which then gets that step's
    answer again; ``same_step`` tells whether the two carry the same content (their digests).

    Raises:
        Conflict: ``seq`` is the last one but the step is another, or ``seq`` is lower than the last one.
    """
    if seq is None or last_seq is None:
        return False
    if seq == last_seq:
        if not same_step():
            raise Conflict(f"seq {seq} was already sent with another step; a retry must repeat the step "
                           "exactly, and a new step needs the next seq")
        return True
    if seq < last_seq:
        raise Conflict(f"seq {seq} is older than this session's last step ({last_seq})")
    return False
