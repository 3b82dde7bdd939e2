"""A sender that wraps another has exactly the capabilities of what it wraps: ``check``
(SupportsCheck) where the inner sender has one, ``turn`` (SupportsTurn) where it has one,
and every call goes through to it."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from notifyonce import (
    FallbackSender,
    FanoutSender,
    Message,
    SupportsCheck,
    SupportsTurn,
    ValidationError,
)
from notifyonce.testing import FakeSender

from ._fakes import CountedTurns, StampingSender

MESSAGE = Message("6 hours left")


class Checking(FakeSender):
    """A FakeSender with a check, which notes what it was asked and refuses ``"bad"``."""

    def __init__(self) -> None:
        super().__init__()
        self.checked: list[str] = []

    def check(self, recipient: str, message: Message) -> None:
        self.checked.append(recipient)
        if recipient == "bad":
            raise ValidationError("recipient", "refused by the inner sender")


class Turning(FakeSender):
    """A FakeSender with a rate-limit turn, which notes the turns entered."""

    def __init__(self) -> None:
        super().__init__()
        self.turns: list[str] = []

    @contextlib.asynccontextmanager
    async def turn(self, recipient: str) -> AsyncIterator[None]:
        self.turns.append(recipient)
        yield


class CheckingAndTurning(Checking, Turning):
    """Both."""


INNERS: dict[tuple[bool, bool], type[FakeSender]] = {
    (False, False): FakeSender,
    (True, False): Checking,
    (False, True): Turning,
    (True, True): CheckingAndTurning,
}

WRAPPERS: dict[str, Callable[[Any], Any]] = {
    "fan-out": lambda inner: FanoutSender({"only": inner}),
    "fallback": lambda inner: FallbackSender({"only": inner}),
    "counted turns": CountedTurns,
    "stamping": lambda inner: StampingSender(inner, lambda: dt.datetime.now(dt.timezone.utc)),
}


@pytest.mark.parametrize(("has_check", "has_turn"), list(INNERS), ids=lambda v: str(v))
@pytest.mark.parametrize("wrapper", list(WRAPPERS))
async def test_a_wrapper_has_the_capabilities_of_what_it_wraps(
    wrapper: str, has_check: bool, has_turn: bool
) -> None:
    """The wrapper supports check and turn exactly when its inner sender does; each call
    of the wrapper's reaches the inner sender."""
    inner = INNERS[has_check, has_turn]()
    outer = WRAPPERS[wrapper](inner)
    assert isinstance(inner, SupportsCheck) == has_check
    assert isinstance(inner, SupportsTurn) == has_turn
    assert isinstance(outer, SupportsCheck) == has_check
    assert isinstance(outer, SupportsTurn) == has_turn
    if isinstance(outer, SupportsCheck):
        assert isinstance(inner, Checking)
        outer.check("42", MESSAGE)
        with pytest.raises(ValidationError):
            outer.check("bad", MESSAGE)
        assert ["42", "bad"] == inner.checked
    if isinstance(outer, SupportsTurn):
        assert isinstance(inner, Turning)
        async with outer.turn("42"):
            assert ["42"] == inner.turns
    await outer.send("7", MESSAGE)
    assert ["7"] == [record.recipient for record in inner.records]


@pytest.mark.parametrize(
    ("channels", "check", "turn"),
    [
        ((FakeSender, Checking), True, False),
        ((Turning, FakeSender), False, True),
        ((FakeSender, CheckingAndTurning), True, True),
        ((FakeSender, FakeSender), False, False),
    ],
)
def test_a_fan_out_checks_and_turns_where_any_channel_does(
    channels: tuple[type[FakeSender], ...], check: bool, turn: bool
) -> None:
    """A fan-out sends through every channel: it refuses where any channel refuses, and
    waits for the turn of every channel that has one."""
    sender = FanoutSender({str(i): kind() for i, kind in enumerate(channels)})
    assert (isinstance(sender, SupportsCheck), isinstance(sender, SupportsTurn)) == (check, turn)


@pytest.mark.parametrize(
    ("channels", "check", "turn"),
    [
        ((Checking, Checking), True, False),
        ((Checking, FakeSender), False, False),  # the second channel takes anything
        ((Turning, FakeSender), False, True),
        ((FakeSender, Turning), False, False),  # a channel fallen back to waits in its send
    ],
)
def test_a_fallback_checks_where_every_channel_does_and_turns_as_its_first(
    channels: tuple[type[FakeSender], ...], check: bool, turn: bool
) -> None:
    """A fallback refuses only what every channel refuses (a channel without a check
    refuses nothing), and waits for the turn of the channel it tries first."""
    sender = FallbackSender({str(i): kind() for i, kind in enumerate(channels)})
    assert (isinstance(sender, SupportsCheck), isinstance(sender, SupportsTurn)) == (check, turn)
