"""The senders wing: how a message leaves, and the only place that imports httpx,
aiohttp, aiogram, python-telegram-bot or apprise.

``status`` (what an error status means), ``redaction`` (secrets out of logs),
``http`` (the httpx base of the HTTP senders), ``transport`` (what a failed request
means), ``retry`` (when to try again), ``aiohttp_transport`` (the senders' own
transport), ``webhook`` and ``signing``,
``channels`` (fan-out and fallback), ``apprise``, ``rate`` (where the rate limiter's
state lives) and ``telegram`` (the Bot API sender and the aiogram and PTB wrappers).
This ``__init__`` imports nothing, so the standard-library parts load without httpx.
"""
