"""The ledger table's Alembic migrations, shipped inside the package.

Two ways to use them:

* Without Alembic in your project: one call creates or upgrades the table.

    ```python
    notifyonce.migrations.upgrade("postgresql+psycopg://app@db/app")
    await notifyonce.migrations.upgrade_async(async_engine)
    ```

* With Alembic: add ``notifyonce:migrations/versions`` to your ``version_locations`` and
  upgrade the ``notifyonce@head`` branch, or call [`upgrade`][notifyonce.migrations.upgrade] with
  the connection from your own ``env.py``. See the Alembic guide in the docs.

Our history keeps its own version table (``<table_name>_alembic_version`` by default), so
it lives beside your application's history without touching it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce._ledger.table import DEFAULT_TABLE_NAME

__all__ = [
    "SCRIPT_LOCATION",
    "file_table_from_config",
    "rate_table_from_config",
    "settings_from_config",
    "upgrade",
    "upgrade_async",
]

SCRIPT_LOCATION = "notifyonce:migrations"

_TABLE = "notifyonce_table_name"
_SCHEMA = "notifyonce_schema"
_VERSION_TABLE = "notifyonce_version_table"
_RATE_TABLE = "notifyonce_rate_table_name"
_FILE_TABLE = "notifyonce_file_table_name"


def default_version_table(table_name: str) -> str:
    """The version table of a ledger table: one per ledger table, beside your own."""
    return f"{table_name}_alembic_version"


def settings_from_config(config: Config) -> tuple[str, str | None]:
    """The ledger's ``(table_name, schema)`` for a migration run.

    Read from the attributes [`upgrade`][notifyonce.migrations.upgrade] sets, else from the
    ``notifyonce_table_name`` and ``notifyonce_schema`` options of your ``alembic.ini`` section,
    else the defaults.
    """
    table = config.attributes.get(_TABLE) or config.get_main_option(_TABLE) or DEFAULT_TABLE_NAME
    schema = config.attributes.get(_SCHEMA) or config.get_main_option(_SCHEMA) or None
    return table, schema


def rate_table_from_config(config: Config) -> str:
    """The rate table's name for a migration run (``SQLRateStore``'s table).

    The ``notifyonce_rate_table_name`` attribute or option, else the default beside the
    ledger table: ``notifyonce_rate_limits``, or ``<ledger table>_rate_limits`` beside a
    ledger table of another name.
    """
    from notifyonce._senders.rate.sql import default_rate_table

    explicit = config.attributes.get(_RATE_TABLE) or config.get_main_option(_RATE_TABLE)
    return explicit or default_rate_table(settings_from_config(config)[0])


def file_table_from_config(config: Config) -> str:
    """The file-id table's name for a migration run (``SQLFileIdStore``'s table).

    The ``notifyonce_file_table_name`` attribute or option, else the default beside the
    ledger table: ``notifyonce_file_ids``, or ``<ledger table>_file_ids`` beside a ledger
    table of another name.
    """
    from notifyonce._senders.telegram.file_sql import default_file_table

    explicit = config.attributes.get(_FILE_TABLE) or config.get_main_option(_FILE_TABLE)
    return explicit or default_file_table(settings_from_config(config)[0])


def _config(
    connection: Connection,
    table_name: str,
    schema: str | None,
    version_table: str | None,
    rate_table_name: str | None = None,
    file_table_name: str | None = None,
) -> Config:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["connection"] = connection
    config.attributes[_TABLE] = table_name
    config.attributes[_SCHEMA] = schema
    config.attributes[_VERSION_TABLE] = version_table or default_version_table(table_name)
    config.attributes[_RATE_TABLE] = rate_table_name
    config.attributes[_FILE_TABLE] = file_table_name
    return config


def _upgrade_on(
    connection: Connection,
    table_name: str,
    schema: str | None,
    version_table: str | None,
    revision: str,
    rate_table_name: str | None = None,
    file_table_name: str | None = None,
) -> None:
    import alembic.context
    import alembic.op

    # Called from an application's own env.py (inside its Alembic run), our run would
    # uninstall Alembic's module-level `context`/`op` proxies on exit; put theirs back.
    outer = [getattr(module, "_proxy", None) for module in (alembic.context, alembic.op)]
    try:
        config = _config(
            connection, table_name, schema, version_table, rate_table_name, file_table_name
        )
        command.upgrade(config, revision)
    finally:
        for proxy in outer:
            if proxy is not None:
                proxy._install_proxy()


def upgrade(
    target: Engine | Connection | str | URL,
    *,
    table_name: str = DEFAULT_TABLE_NAME,
    schema: str | None = None,
    version_table: str | None = None,
    revision: str = "heads",
    rate_table_name: str | None = None,
    file_table_name: str | None = None,
) -> None:
    """Create or upgrade the ledger table to ``revision`` (the latest by default).

    Args:
        target: An Engine, a Connection (its transaction is used and not committed), or a
            database URL (an async driver URL works too).
        table_name: The ledger table's name, as given to the ledger.
        schema: Its schema, as given to the ledger (the schema must exist).
        version_table: Where this history records its revision; defaults to
            ``<table_name>_alembic_version``.
        revision: The revision to upgrade to.
        rate_table_name: The table of ``SQLRateStore`` (created by revision
            ``notifyonce_0002``); defaults to ``notifyonce_rate_limits`` beside the default
            ledger table, ``<table_name>_rate_limits`` beside another.
        file_table_name: The table of ``SQLFileIdStore`` (created by revision
            ``notifyonce_0003``); defaults to ``notifyonce_file_ids`` beside the default
            ledger table, ``<table_name>_file_ids`` beside another.

    Examples:
        >>> import sqlalchemy as sa
        >>> engine = sa.create_engine("sqlite://")  # or "postgresql+psycopg://app@db/app"
        >>> upgrade(engine)
        >>> sa.inspect(engine).has_table("notifyonce_slots")
        True
        >>> engine.dispose()
    """
    tables = (rate_table_name, file_table_name)
    if isinstance(target, Connection):
        _upgrade_on(target, table_name, schema, version_table, revision, *tables)
        return
    if isinstance(target, (str, URL)):
        url = make_url(target)
        if url.get_dialect().is_async:
            asyncio.run(
                _upgrade_async_url(url, table_name, schema, version_table, revision, *tables)
            )
            return
        engine = sa.create_engine(url)
        try:
            upgrade(
                engine,
                table_name=table_name,
                schema=schema,
                version_table=version_table,
                revision=revision,
                rate_table_name=rate_table_name,
                file_table_name=file_table_name,
            )
        finally:
            engine.dispose()
        return
    with target.begin() as connection:
        _upgrade_on(connection, table_name, schema, version_table, revision, *tables)


async def _upgrade_async_url(url: URL, *args: Any) -> None:
    engine = create_async_engine(url)
    try:
        await upgrade_async(engine, *args)
    finally:
        await engine.dispose()


async def upgrade_async(
    engine: AsyncEngine,
    table_name: str = DEFAULT_TABLE_NAME,
    schema: str | None = None,
    version_table: str | None = None,
    revision: str = "heads",
    rate_table_name: str | None = None,
    file_table_name: str | None = None,
) -> None:
    """[`upgrade`][notifyonce.migrations.upgrade] for an ``AsyncEngine``.

    Examples:
        >>> import asyncio
        >>> from sqlalchemy.ext.asyncio import create_async_engine
        >>> async def main() -> None:
        ...     engine = create_async_engine("sqlite+aiosqlite://")
        ...     await upgrade_async(engine, table_name="bot_slots")
        ...     await engine.dispose()
        >>> asyncio.run(main())
    """
    async with engine.begin() as connection:
        await connection.run_sync(
            _upgrade_on,
            table_name,
            schema,
            version_table,
            revision,
            rate_table_name,
            file_table_name,
        )
