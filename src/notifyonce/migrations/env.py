"""Alembic environment of notifyonce's own migration history.

Used by [`upgrade`][notifyonce.migrations.upgrade], which passes the connection and the ledger's
table name, schema and version table in ``config.attributes``. Run from the command line
(``alembic -c yourfile.ini``), it reads ``sqlalchemy.url`` and the ``notifyonce_*`` options.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from notifyonce.migrations import default_version_table, settings_from_config

config = context.config
table_name, schema = settings_from_config(config)
version_table = (
    config.attributes.get("notifyonce_version_table")
    or config.get_main_option("notifyonce_version_table")
    or default_version_table(table_name)
)


def _run(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        version_table=version_table,
        version_table_schema=schema,
        transactional_ddl=None,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = sa.create_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.begin() as own_connection:
            _run(own_connection)
    finally:
        engine.dispose()
