"""The ledger wing: where a slot is claimed, leased, marked and swept.

``ledger`` holds the public shells (``AsyncLedger``, ``Ledger``), ``core`` the one
implementation of the SQL and the transaction rules, ``dialects`` what differs between
PostgreSQL, MySQL and SQLite (a class each), ``checks`` the argument checks
run before any SQL, ``records`` what the ledger returns, ``table`` the table itself,
``claim`` a won slot. Imports only the shared vocabulary and SQLAlchemy.
"""
