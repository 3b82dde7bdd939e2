"""The audience: who cannot be reached any more and who opted out of what.

A wing beside the ledger, the schedule and the senders. The notifier and the broadcast
ask it before they claim; what a sender's refusal says of its recipient
(``SendError.gone``) feeds it; the bot helpers, the command line and the console read
and write it through its public API. It imports none of them.
"""

from notifyonce._audience.store import (
    AsyncAudience,
    Audience,
    AudienceCheck,
    AudienceCounts,
    AudienceRow,
    Gone,
    OptOut,
    RecipientState,
    normalize_category,
    normalize_recipient,
    skip_reason,
)
from notifyonce._audience.table import (
    DEFAULT_RECIPIENT_TABLE_NAME,
    GoneReason,
    build_recipient_table,
    default_recipient_table,
)

__all__ = [
    "DEFAULT_RECIPIENT_TABLE_NAME",
    "AsyncAudience",
    "Audience",
    "AudienceCheck",
    "AudienceCounts",
    "AudienceRow",
    "Gone",
    "GoneReason",
    "OptOut",
    "RecipientState",
    "build_recipient_table",
    "default_recipient_table",
    "normalize_category",
    "normalize_recipient",
    "skip_reason",
]
