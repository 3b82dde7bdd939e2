"""Read-only Django models over the ledger's table, for the admin: a slot, and a
campaign (the row a broadcast keeps of its message). Unmanaged: the app's migrations
create the table, these never change it."""

from __future__ import annotations

from django.db import models

from notifyonce._campaign import CAMPAIGN_ACTION
from notifyonce._ledger.table import DEFAULT_TABLE_NAME, SlotStatus
from notifyonce.contrib.django.fields import KeyTextField

__all__ = ["Campaign", "Slot"]

STATUS_CHOICES = [(status.value, status.value) for status in SlotStatus]


class Slot(models.Model):
    """One ``(action, subject, cycle)`` slot of the ledger and where it stands."""

    id = models.BigAutoField(primary_key=True)
    action = KeyTextField(max_length=64)
    subject = KeyTextField(max_length=128)
    cycle = KeyTextField(max_length=128)
    cycle_at = models.DateTimeField(null=True)
    status = models.CharField(max_length=16, choices=STATUS_CHOICES)
    attempt = models.IntegerField()
    token = models.BigIntegerField()
    lease_until = models.DateTimeField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True)
    last_error = models.CharField(max_length=500, null=True)
    message_id = models.CharField(max_length=128, null=True)

    class Meta:
        managed = False
        db_table = DEFAULT_TABLE_NAME
        ordering = ("-updated_at",)
        verbose_name = "slot"

    def __str__(self) -> str:
        return f"{self.action}/{self.subject}/{self.cycle}"


class CampaignManager(models.Manager["Campaign"]):
    def get_queryset(self) -> models.QuerySet[Campaign]:
        return super().get_queryset().filter(action=CAMPAIGN_ACTION)


class Campaign(Slot):
    """A broadcast's campaign: its row under the action ``notifyonce.campaign``, whose
    subject is the broadcast's action and whose cycle is the campaign id."""

    objects = CampaignManager()

    class Meta:
        proxy = True
        ordering = ("-created_at",)
        verbose_name = "campaign"

    def __str__(self) -> str:
        return f"{self.subject}/{self.cycle}"
