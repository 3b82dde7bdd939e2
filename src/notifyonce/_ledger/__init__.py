"""The ledger wing: where a slot is claimed, leased, marked and swept.

``ledger`` holds the public shells (``AsyncLedger``, ``Ledger``), ``core`` the one
implementation of the SQL and the transaction rules (and ``Plan``, which names the shape
of transaction a call needs), ``dialects`` the send path's statements on PostgreSQL,
MySQL and SQLite (a class each, made with the engine's driver), ``checks`` the argument
checks run before any SQL, ``records`` what the ledger returns, ``table`` the table
itself, ``claim`` a won slot. Imports only the shared vocabulary, the drivers and
SQLAlchemy.
"""
