"""The bot helpers: what a bot's updates say about its audience, recorded for it.

An integration leaf beside the doors: it imports the audience, the shared vocabulary and
a bot library (aiogram in ``aiogram.py``, python-telegram-bot in ``ptb.py``; the rules
both follow, in ``rules.py``, import neither). Only the public modules
``notifyonce.aiogram`` and ``notifyonce.ptb`` import it, so the core never loads a bot
library.
"""
