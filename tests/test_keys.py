"""Slot key validation and normalisation."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notifyonce import SlotKey, ValidationError, ValidationTypeError, make_key
from notifyonce._keys import MAX_ACTION_LENGTH, MAX_CYCLE_LENGTH, MAX_SUBJECT_LENGTH

UTC = dt.timezone.utc

aware_datetimes = st.datetimes(
    min_value=dt.datetime(1971, 1, 1),
    max_value=dt.datetime(2200, 1, 1),
    timezones=st.sampled_from(
        [UTC, dt.timezone(dt.timedelta(hours=3)), dt.timezone(dt.timedelta(hours=-9, minutes=-30))]
    ),
)


def test_datetime_cycle_matches_int_timestamp() -> None:
    """A datetime cycle names the same second as int(period_end.timestamp())."""
    end = dt.datetime(2026, 12, 1, 21, 30, 15, 999_999, tzinfo=dt.timezone(dt.timedelta(hours=3)))
    key = make_key("trial_6h", 42, end)
    assert SlotKey("trial_6h", "42", "2026-12-01T18:30:15Z", key.cycle_at) == key
    assert key.cycle_at is not None
    assert int(end.timestamp()) == int(key.cycle_at.timestamp())


@given(aware_datetimes)
def test_datetime_cycle_depends_only_on_the_utc_second(when: dt.datetime) -> None:
    """The same instant in any zone, with any microseconds, gives the same key."""
    utc = when.astimezone(UTC)
    same = [
        when,
        utc,
        utc.replace(microsecond=0),
        utc.astimezone(dt.timezone(dt.timedelta(hours=14))),
    ]
    assert 1 == len({make_key("a", 1, w) for w in same})


@given(aware_datetimes, aware_datetimes)
def test_datetime_cycle_text_sorts_like_time(a: dt.datetime, b: dt.datetime) -> None:
    """Text order of datetime cycles is time order (the unique index relies on it)."""
    ka, kb = make_key("a", 1, a), make_key("a", 1, b)
    assert ka.cycle_at is not None
    assert kb.cycle_at is not None
    assert (ka.cycle_at < kb.cycle_at) == (ka.cycle < kb.cycle)


@given(st.integers(min_value=-(10**30), max_value=10**30))
def test_int_and_str_subjects_agree(subject: int) -> None:
    """An int subject and its decimal text name the same slot."""
    assert make_key("a", subject, 1) == make_key("a", str(subject), 1)


def test_date_cycle() -> None:
    """A date is stored as ISO text; for retention it lasts until it has ended everywhere."""
    key = make_key("invoice", "u1", dt.date(2026, 12, 1))
    assert "2026-12-01" == key.cycle
    assert dt.datetime(2026, 12, 2, 12, tzinfo=UTC) == key.cycle_at
    last_zone = dt.timezone(dt.timedelta(hours=-12))
    assert dt.datetime(2026, 12, 2, tzinfo=last_zone) == key.cycle_at


@pytest.mark.parametrize(
    ("action", "subject", "cycle", "field", "error"),
    [
        ("a", 1, dt.datetime(2026, 1, 1), "cycle", ValidationError),
        ("", 1, 1, "action", ValidationError),
        ("   ", 1, 1, "action", ValidationError),
        ("x" * (MAX_ACTION_LENGTH + 1), 1, 1, "action", ValidationError),
        ("a\nb", 1, 1, "action", ValidationError),
        (None, 1, 1, "action", ValidationTypeError),
        ("a", "", 1, "subject", ValidationError),
        ("a", "s" * (MAX_SUBJECT_LENGTH + 1), 1, "subject", ValidationError),
        ("a", True, 1, "subject", ValidationTypeError),
        ("a", 1.5, 1, "subject", ValidationTypeError),
        ("a", None, 1, "subject", ValidationTypeError),
        ("a", 1, "", "cycle", ValidationError),
        ("a", 1, "c" * (MAX_CYCLE_LENGTH + 1), "cycle", ValidationError),
        ("a", 1, False, "cycle", ValidationTypeError),
        ("a", 1, 1.0, "cycle", ValidationTypeError),
        ("a", 1, dt.time(12), "cycle", ValidationTypeError),
    ],
)
def test_bad_key_parts_name_the_field(
    action: object, subject: object, cycle: object, field: str, error: type[Exception]
) -> None:
    """Every kind of bad key part raises an error naming the field."""
    with pytest.raises(error) as info:
        make_key(action, subject, cycle)
    assert field == info.value.field  # type: ignore[attr-defined]
    assert str(info.value).startswith(f"{field}: ")


def test_type_errors_are_both_value_and_type_errors() -> None:
    """A wrong type can be caught as TypeError or ValueError."""
    with pytest.raises(TypeError):
        make_key("a", object(), 1)
    with pytest.raises(ValueError):
        make_key("a", object(), 1)


@given(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3), st.integers(0, 3)),
)
def test_idempotency_key_is_one_per_slot(a: tuple[str, int, int], b: tuple[str, int, int]) -> None:
    """Two keys share an idempotency key exactly when they name the same slot."""
    ka, kb = make_key(*a), make_key(*b)
    assert (ka == kb) == (ka.idempotency_key == kb.idempotency_key)


def test_idempotency_key_is_header_safe() -> None:
    """The idempotency key is short ASCII with no separators, whatever the parts hold."""
    key = make_key("действие", "user:1; x=y", "2026 Q4").idempotency_key
    assert key.isascii()
    assert 37 == len(key)
    assert all(ch.isalnum() or ch == "-" for ch in key)


@pytest.mark.parametrize(
    ("action", "subject", "cycle", "field"),
    [
        ("a\x00b", 1, 1, "action"),
        ("a", "u\x00", 1, "subject"),
        ("a", 1, "c\x00", "cycle"),
        ("a\ud800", 1, 1, "action"),
        ("a", "u\udfff", 1, "subject"),
        ("a", 1, "\ud83dc", "cycle"),
    ],
)
def test_nul_and_lone_surrogates_are_refused(
    action: str, subject: object, cycle: object, field: str
) -> None:
    """NUL and a lone surrogate (not encodable as UTF-8) are refused before any SQL."""
    with pytest.raises(ValidationError) as info:
        make_key(action, subject, cycle)
    assert field == info.value.field


def test_a_surrogate_pair_spelled_as_one_character_is_fine() -> None:
    """An astral character (one code point, valid UTF-8) is an ordinary key part."""
    assert "u\U0001f600" == make_key("a", "u\U0001f600", 1).subject


@pytest.mark.parametrize(
    "cycle",
    [
        dt.datetime.min.replace(tzinfo=dt.timezone(dt.timedelta(hours=5))),
        dt.datetime.max.replace(tzinfo=dt.timezone(dt.timedelta(hours=-5))),
        dt.datetime(1, 1, 1, 3, tzinfo=UTC),
        dt.date.max,
        dt.date.min,
    ],
    ids=["min+05", "max-05", "year1", "date-max", "date-min"],
)
def test_datetimes_near_the_ends_of_time_are_a_validation_error(cycle: object) -> None:
    """A cycle whose UTC form (or a date's end) would overflow is refused, naming the field."""
    with pytest.raises(ValidationError) as info:
        make_key("a", 1, cycle)
    assert "cycle" == info.value.field


@given(
    st.datetimes(
        timezones=st.sampled_from(
            [UTC, dt.timezone(dt.timedelta(hours=14)), dt.timezone(dt.timedelta(hours=-12))]
        )
    )
)
def test_any_aware_datetime_gives_a_key_or_a_validation_error(when: dt.datetime) -> None:
    """No aware datetime makes key normalisation raise anything but ValidationError."""
    if dt.date(1, 1, 2) <= when.date() <= dt.date(9999, 12, 29):
        assert 20 == len(make_key("a", 1, when).cycle)
    else:
        with pytest.raises(ValidationError, match=r"^cycle: "):
            make_key("a", 1, when)


def test_naive_datetime_advice_does_not_depend_on_the_host() -> None:
    """The naive-datetime error names the host-independent fixes, never astimezone()."""
    with pytest.raises(ValidationError) as info:
        make_key("a", 1, dt.datetime(2026, 12, 1, 18))
    text = str(info.value)
    assert "replace(tzinfo=timezone.utc)" in text
    assert "ZoneInfo" in text
    assert "astimezone()" not in text.replace("Never value.astimezone()", "")
