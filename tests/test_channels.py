"""FanoutSender and FallbackSender with FakeSender: the combination rules, one slot for all."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notifyonce import (
    Channel,
    ChannelReceipt,
    FallbackSender,
    FanoutSender,
    Message,
    PermanentSendError,
    Receipt,
    Sender,
    SendError,
    TransientSendError,
    UncertainSendError,
    ValidationError,
)
from notifyonce._senders.channels import combine_fanout
from notifyonce.testing import OK, FakeSender

MESSAGE = Message("6 hours left", idempotency_key="slot-1")


def blocked() -> PermanentSendError:
    return PermanentSendError("Forbidden: bot was blocked", code=403)


def flood(seconds: float) -> TransientSendError:
    return TransientSendError("Too Many Requests", code=429, retry_after=seconds)


def lost() -> UncertainSendError:
    return UncertainSendError("ReadTimeout")


def senders(*scripts: list[object]) -> dict[str, FakeSender]:
    result = {}
    for number, steps in enumerate(scripts):
        fake = FakeSender()
        fake.script(None, steps)  # type: ignore[arg-type]
        result[f"c{number}"] = fake
    return result


async def outcome(sender: Sender) -> Receipt | SendError:
    try:
        return await sender.send("42", MESSAGE)
    except SendError as exc:
        return exc


async def test_fanout_delivers_to_every_channel() -> None:
    """All channels deliver: the receipt lists each, the key reaches each channel."""
    fakes = senders([OK], [OK])
    result = await outcome(FanoutSender(fakes))
    assert isinstance(result, ChannelReceipt)
    assert ("c0", "c1") == result.channels
    assert "42" == result.recipient
    assert ["slot-1", "slot-1"] == [f.records[0].message.idempotency_key for f in fakes.values()]


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (blocked(), OK, PermanentSendError),
        (blocked(), lost(), PermanentSendError),
        (blocked(), flood(1), PermanentSendError),
        (lost(), OK, UncertainSendError),
        (lost(), flood(1), UncertainSendError),
        (flood(1), OK, UncertainSendError),
        (flood(1), flood(5), TransientSendError),
    ],
    ids=[
        "permanent+ok",
        "permanent+uncertain",
        "permanent+transient",
        "uncertain+ok",
        "uncertain+transient",
        "transient+ok(partial)",
        "transient+transient",
    ],
)
async def test_fanout_combination_rule(first: object, second: object, expected: type) -> None:
    """Permanent wins; then uncertain or partial delivery; all transient stays transient."""
    result = await outcome(FanoutSender(senders([first], [second])))
    assert expected is type(result)


async def test_fanout_all_transient_waits_for_the_longest() -> None:
    """With every channel flooded, retry_after is the longest wait (when all may retry)."""
    result = await outcome(FanoutSender(senders([flood(1)], [flood(5)])))
    assert isinstance(result, TransientSendError)
    assert 5.0 == result.retry_after


async def test_fanout_non_send_errors_follow_the_protocol() -> None:
    """A channel raising a plain exception counts as uncertain; a ValidationError as permanent."""

    class Broken:
        async def send(self, recipient: str, message: Message) -> Receipt:
            raise RuntimeError("boom")

    class Picky:
        async def send(self, recipient: str, message: Message) -> Receipt:
            raise ValidationError("recipient", "not an e-mail address")

    assert isinstance(
        await outcome(FanoutSender({"a": Broken(), "b": FakeSender()})), UncertainSendError
    )
    assert isinstance(
        await outcome(FanoutSender({"a": Picky(), "b": FakeSender()})), PermanentSendError
    )


async def test_channel_maps_the_recipient() -> None:
    """A Channel's recipient function addresses the notification on that channel."""
    email = FakeSender()
    sender = FanoutSender(
        [
            Channel("telegram", FakeSender()),
            Channel("email", email, recipient=lambda u: f"{u}@x.org"),
        ]
    )
    result = await sender.send("42", MESSAGE)
    assert "42@x.org" == email.records[0].recipient
    assert "42@x.org" == result.receipts["email"].recipient


async def test_fallback_uses_the_first_channel_that_delivers() -> None:
    """A permanent then a transient failure fall through; the receipt names the deliverer."""
    fakes = senders([blocked()], [flood(2)], [OK])
    result = await outcome(FallbackSender(fakes))
    assert isinstance(result, ChannelReceipt)
    assert ("c2",) == result.channels
    assert ["c0", "c1"] == list(result.failures)
    assert [1, 1, 1] == [len(f.records) for f in fakes.values()]


async def test_fallback_stops_at_an_uncertain_failure() -> None:
    """An uncertain failure stops the fallback: the next channel could duplicate it."""
    fakes = senders([lost()], [OK])
    result = await outcome(FallbackSender(fakes))
    assert isinstance(result, UncertainSendError)
    assert 0 == len(fakes["c1"].records)


async def test_fallback_on_uncertain_when_asked() -> None:
    """fallback_on_uncertain=True moves on after an uncertain failure."""
    fakes = senders([lost()], [OK])
    result = await outcome(FallbackSender(fakes, fallback_on_uncertain=True))
    assert isinstance(result, ChannelReceipt)
    assert ("c1",) == result.channels


@pytest.mark.parametrize(
    ("scripts", "expected", "retry_after"),
    [
        ([[blocked()], [blocked()]], PermanentSendError, None),
        ([[flood(9)], [blocked()], [flood(3)]], TransientSendError, 3.0),
    ],
    ids=["all-permanent", "some-transient"],
)
async def test_fallback_when_nothing_delivers(
    scripts: list[list[object]], expected: type, retry_after: float | None
) -> None:
    """Nothing delivered: transient (shortest wait) if a channel may work later, else permanent."""
    result = await outcome(FallbackSender(senders(*scripts)))
    assert expected is type(result)
    if isinstance(result, TransientSendError):
        assert retry_after == result.retry_after


@pytest.mark.parametrize(
    "channels",
    [{}, [Channel("a", FakeSender()), Channel("a", FakeSender())], ["not a channel"]],
    ids=["empty", "duplicate-names", "wrong-type"],
)
def test_invalid_channels_name_the_field(channels: object) -> None:
    """Empty, duplicate or mistyped channels raise a ValidationError on 'channels'."""
    for make in (FanoutSender, FallbackSender):
        with pytest.raises(ValidationError) as info:
            make(channels)  # type: ignore[arg-type]
        assert "channels" == info.value.field


results = st.sampled_from(
    [Receipt("42"), blocked(), flood(1), lost(), TransientSendError("503", code=503)]
)


@settings(deadline=None)
@given(st.lists(results, min_size=1, max_size=5))
def test_fanout_rule_properties(outcomes: list[Receipt | SendError]) -> None:
    """The combined class never understates risk: delivered only if all delivered, never
    transient when something was or may have been delivered, permanent iff one refused."""
    combined = combine_fanout({f"c{n}": r for n, r in enumerate(outcomes)})
    errors = [r for r in outcomes if isinstance(r, SendError)]
    assert (combined is None) == (not errors)
    if combined is None:
        return
    assert isinstance(combined, PermanentSendError) == any(
        isinstance(e, PermanentSendError) for e in errors
    )
    maybe_delivered = len(errors) < len(outcomes) or any(
        isinstance(e, UncertainSendError) for e in errors
    )
    if maybe_delivered:
        assert not isinstance(combined, TransientSendError)
