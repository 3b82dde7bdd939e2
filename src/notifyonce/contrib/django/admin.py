"""Read-only admin pages for the ledger: its slots and its campaigns.

Nothing here adds, changes or deletes a row: a slot's state moves only through the
ledger's own calls (a fencing token guards every change), so the admin shows and never
writes. To requeue or cancel, use ``notifyonce requeue`` or the operator console
(``notifyonce web``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from notifyonce._ledger.table import SlotStatus
from notifyonce.contrib.django._connect import database_alias
from notifyonce.contrib.django.models import Campaign, Slot

__all__ = ["CampaignAdmin", "SlotAdmin"]


class _ReadOnly(admin.ModelAdmin):
    """Lists and shows rows of the ledger's database; grants no add, change or delete."""

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).using(database_alias())

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [field.name for field in self.model._meta.fields]


@admin.register(Slot)
class SlotAdmin(_ReadOnly):
    """The ledger's slots: find one by its key, filter by status."""

    list_display = ("action", "subject", "cycle", "status", "attempt", "updated_at", "sent_at")
    list_filter = ("status",)
    # Exact look-ups of the two key parts that lead an index (the key, the subject's); a
    # "contains" search, or the cycle alone, would read the whole table.
    search_fields = ("=action", "=subject")
    show_full_result_count = False


@admin.register(Campaign)
class CampaignAdmin(_ReadOnly):
    """The broadcasts' campaigns, each with its slots counted by status."""

    # Headed in the words of the broadcast (its action and campaign id), not the row's
    # columns (a campaign row keeps the action as its subject, the id as its cycle).
    list_display = ("action_name", "campaign", "recipients", "sent", "created_at", "updated_at")
    search_fields = ("=subject", "=cycle")

    @admin.display(description="action", ordering="subject")
    def action_name(self, obj: Campaign) -> str:
        return str(obj.subject)

    @admin.display(description="campaign", ordering="cycle")
    def campaign(self, obj: Campaign) -> str:
        return str(obj.cycle)

    @admin.display(description="recipients")
    def recipients(self, obj: Campaign) -> int | None:
        # The campaign row's token keeps the broadcast's recipient count; 0: not known.
        total: int = obj.token
        return total or None

    @admin.display(description="sent")
    def sent(self, obj: Campaign) -> int:
        # One range of the (status, action, cycle) index.
        slots = Slot.objects.using(database_alias())
        sent = slots.filter(status=SlotStatus.SENT.value, action=obj.subject, cycle=obj.cycle)
        count: int = sent.count()
        return count
