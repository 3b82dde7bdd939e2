"""TelegramSender's implementation; the public names live in :mod:`notifyonce.telegram`."""
