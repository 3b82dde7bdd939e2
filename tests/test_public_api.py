"""The public API contract: the names users and acceptance checks import."""

from __future__ import annotations

import importlib

import pytest

import notifyonce

CONTRACT = [
    "AsyncLedger", "Ledger", "Claim", "Window", "Schedule", "Message", "Receipt", "Sender",
    "Notifier", "Notification", "Outcome", "DeliveryMode", "NotifyOnceError", "ScheduleError",
    "SendError", "PermanentSendError", "TransientSendError", "UncertainSendError",
    "CampaignRevision", "Revision", "SentMessages", "recipients_from_campaign",
    "once", "once_call", "OnceGuard", "OnceResult", "NotDoneError", "Digest", "FrequencyCap",
]  # fmt: skip


def test_contract_names_are_exported() -> None:
    """Every name of the contract is importable from notifyonce and listed in __all__."""
    assert [] == [name for name in CONTRACT if name not in notifyonce.__all__]
    for name in CONTRACT:
        assert getattr(notifyonce, name) is not None


def test_all_is_sorted_and_importable() -> None:
    """__all__ is sorted and every name in it exists."""
    assert sorted(notifyonce.__all__) == notifyonce.__all__
    assert [] == [name for name in notifyonce.__all__ if not hasattr(notifyonce, name)]


@pytest.mark.parametrize(
    ("module", "name"),
    [("notifyonce.telegram", "TelegramSender"), ("notifyonce.testing", "FakeSender")],
)
def test_contract_submodules(module: str, name: str) -> None:
    """TelegramSender and FakeSender live where the contract says."""
    assert hasattr(importlib.import_module(module), name)


def test_outcomes_and_errors_of_the_contract() -> None:
    """Outcome has the contract's members; the error classes nest as documented."""
    assert {"SENT", "DUPLICATE", "FAILED", "RETRY", "UNKNOWN"} <= set(
        notifyonce.Outcome.__members__
    )
    for error in (
        notifyonce.PermanentSendError,
        notifyonce.TransientSendError,
        notifyonce.UncertainSendError,
    ):
        assert issubclass(error, notifyonce.SendError)
    assert issubclass(notifyonce.SendError, notifyonce.NotifyOnceError)
    assert issubclass(notifyonce.ScheduleError, notifyonce.NotifyOnceError)
    assert None is notifyonce.TransientSendError("x").retry_after


def test_media_names_and_unchanged_message_and_receipt() -> None:
    """Photo, Document and Video are exported; Message and Receipt keep their positional
    fields, media and file_id come last with None defaults."""
    import dataclasses

    for name in ("Photo", "Document", "Video"):
        assert name in notifyonce.__all__
    message_fields = [f.name for f in dataclasses.fields(notifyonce.Message)]
    assert ["text", "parse_mode", "silent", "link_preview"] == message_fields[:4]
    assert "media" == message_fields[-1]
    assert None is notifyonce.Message("hi").media
    receipt = notifyonce.Receipt("1", 2, "3")
    assert ("1", 2, "3", None) == (
        receipt.recipient,
        receipt.message_id,
        receipt.migrated_to,
        receipt.file_id,
    )
    for name in ("FileIdStore", "MemoryFileIdStore", "SQLFileIdStore"):
        assert hasattr(importlib.import_module("notifyonce.telegram"), name)


def test_http_options_are_one_typed_dict_for_both_senders() -> None:
    """HTTPOptions is exported by notifyonce.telegram and notifyonce.webhook (the same
    class) and lists exactly the HTTP keywords both senders accept."""
    import typing

    telegram = importlib.import_module("notifyonce.telegram")
    webhook = importlib.import_module("notifyonce.webhook")
    assert "HTTPOptions" in telegram.__all__
    assert "HTTPOptions" in webhook.__all__
    assert telegram.HTTPOptions is webhook.HTTPOptions
    assert {
        "budget", "connect_timeout", "write_timeout", "pool_timeout", "limits",
        "max_retries", "backoff_base", "backoff_max",
    } == set(typing.get_type_hints(telegram.HTTPOptions))  # fmt: skip


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("notifyonce.telegram", "SenderClosedError"),
        ("notifyonce._senders.http", "SenderClosedError"),
        ("notifyonce.ratelimit", "RateStoreUnavailableError"),
        ("notifyonce._senders.rate.stores", "RateStoreUnavailableError"),
        ("notifyonce.telegram", "RedactedTransportError"),
        ("notifyonce.webhook", "RedactedTransportError"),
        ("notifyonce._senders.redaction", "RedactedTransportError"),
    ],
)
def test_every_exception_lives_in_errors_and_keeps_its_import_paths(module: str, name: str) -> None:
    """The exceptions the senders raise are defined with all the others, and are still
    importable from where they were."""
    from notifyonce import _errors

    assert name in _errors.__all__
    assert getattr(_errors, name) is getattr(importlib.import_module(module), name)
