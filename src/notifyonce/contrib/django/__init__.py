"""notifyonce in a Django project: the ledger's tables as Django migrations, ledgers built
from ``settings.DATABASES``, read-only admin pages and the ``notifyonce_sweep`` and
``notifyonce_purge`` management commands.

```python
INSTALLED_APPS = [..., "notifyonce.contrib.django"]
NOTIFYONCE = {"DATABASE": "default"}  # optional: the DATABASES alias of the ledger
```

then ``python manage.py migrate notifyonce``, and in the project's code:

```python
from notifyonce.contrib.django import ledger

LEDGER = ledger()  # a notifyonce Ledger on that database (async_ledger(): an AsyncLedger)
```

Importing this package needs no configured settings; its functions read them when called.
"""

from __future__ import annotations

from notifyonce.contrib.django._connect import (
    MIGRATE_COMMAND,
    async_ledger,
    database_alias,
    database_url,
    ledger,
)

__all__ = ["MIGRATE_COMMAND", "async_ledger", "database_alias", "database_url", "ledger"]
