"""TelegramSender's implementation; the public names live in ``notifyonce.telegram``."""
