"""The Django app's configuration: its label ``notifyonce`` names its migrations
(``python manage.py migrate notifyonce``)."""

from __future__ import annotations

from django.apps import AppConfig

__all__ = ["NotifyOnceConfig"]


class NotifyOnceConfig(AppConfig):
    """``notifyonce.contrib.django`` in ``INSTALLED_APPS``."""

    name = "notifyonce.contrib.django"
    label = "notifyonce"
    verbose_name = "notifyonce"
    default_auto_field = "django.db.models.BigAutoField"
