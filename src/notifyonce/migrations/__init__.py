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

Tables made without the migration (``create_schema()`` of the ledger and of the stores)
are adopted: a revision whose tables, columns and indexes all exist already is recorded
as done instead of run, so ``notifyonce migrate`` after a quick start creates only what is
missing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.operations import Operations, ops
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import Script, ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce._drivers import driver_class, missing_driver
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

logger = logging.getLogger("notifyonce.migrations")

E = TypeVar("E", Engine, AsyncEngine)

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
) -> list[str]:
    import alembic.context
    import alembic.op

    # Called from an application's own env.py (inside its Alembic run), our run would
    # uninstall Alembic's module-level `context`/`op` proxies on exit; put theirs back.
    outer = [getattr(module, "_proxy", None) for module in (alembic.context, alembic.op)]
    try:
        config = _config(
            connection, table_name, schema, version_table, rate_table_name, file_table_name
        )
        adopted = _adopt_existing(connection, config, revision)
        command.upgrade(config, revision)
        return adopted
    finally:
        for proxy in outer:
            if proxy is not None:
                proxy._install_proxy()


# -- adopting tables made without the migration ------------------------------------------


def _operations(script: Script, context: MigrationContext) -> list[ops.MigrateOperation]:
    """What ``script``'s upgrade would do, read without doing it: Alembic's ``op`` is
    pointed at an ``Operations`` that notes each operation and runs none."""
    recorded: list[ops.MigrateOperation] = []
    recorder = Operations(context)

    def note(operation: ops.MigrateOperation) -> Any:
        recorded.append(operation)
        if isinstance(operation, ops.CreateTableOp):
            return operation.to_table(context)
        return None

    recorder.invoke = note  # type: ignore[method-assign]
    recorder._install_proxy()
    try:
        script.module.upgrade()
    finally:
        recorder._remove_proxy()
    return recorded


def _found(inspector: Any, operation: ops.MigrateOperation) -> bool | None:
    """Whether what ``operation`` creates exists already; None when it cannot be told."""
    if isinstance(operation, ops.CreateTableOp):
        name, schema = operation.table_name, operation.schema
        if not inspector.has_table(name, schema=schema):
            return False
        have = {c["name"] for c in inspector.get_columns(name, schema=schema)}
        want = {c.name for c in operation.columns if isinstance(c, sa.Column)}
        missing = sorted(want - have)
        if missing:
            raise CommandError(
                f"table {name!r} exists but lacks the columns {', '.join(missing)}: it was "
                "not made by notifyonce, or by another version; nothing was changed"
            )
        return True
    if isinstance(operation, ops.CreateIndexOp):
        name, schema = operation.table_name, operation.schema
        if not inspector.has_table(name, schema=schema):
            return False
        # A unique index shows up as a constraint on some databases, as an index on others.
        indexes = {i["name"]: i for i in inspector.get_indexes(name, schema=schema)}
        names = set(indexes) | {
            u["name"] for u in inspector.get_unique_constraints(name, schema=schema)
        }
        if operation.index_name not in names:
            return False
        # A partial index (WHERE) is there only as a partial one: an earlier revision made
        # the same name over every row.
        where = driver_class(inspector.dialect).index_where()
        found = indexes.get(operation.index_name or "", {}).get("dialect_options", {})
        return operation.kw.get(where) is None or found.get(where) is not None
    if isinstance(operation, ops.DropIndexOp):
        return None  # what a revision drops is judged by what it creates in its place
    if isinstance(operation, ops.AddColumnOp):
        name, schema = operation.table_name, operation.schema
        if not inspector.has_table(name, schema=schema):
            return False
        have = {c["name"] for c in inspector.get_columns(name, schema=schema)}
        return operation.column.name in have
    return None


def _describe(operation: ops.MigrateOperation) -> str:
    if isinstance(operation, ops.CreateTableOp):
        return f"table {operation.table_name}"
    if isinstance(operation, ops.CreateIndexOp):
        return f"index {operation.index_name} on {operation.table_name}"
    if isinstance(operation, ops.AddColumnOp):
        return f"column {operation.column.name} of {operation.table_name}"
    return type(operation).__name__


def _already_there(
    connection: Connection, script: Script, context: MigrationContext
) -> bool | None:
    """True when everything ``script`` creates exists; False when none of it does; None
    when it does nothing on this database.

    Raises:
        CommandError: Part of it exists (or what exists does not match): a person must
            look, since running the revision would fail and recording it would lie.
    """
    inspector = sa.inspect(connection)  # a new one each time: no cached reflection
    found = [
        (operation, _found(inspector, operation)) for operation in _operations(script, context)
    ]
    if not found:
        return None  # nothing to do on this database (a partial index where there are none)
    there = [operation for operation, state in found if state]
    if not there:
        return False
    missing = [operation for operation, state in found if state is False]
    if not missing:
        return True
    raise CommandError(
        f"revision {script.revision} is only partly in the database: "
        f"{', '.join(_describe(o) for o in there)} exist, "
        f"{', '.join(_describe(o) for o in missing)} do not; nothing was changed"
    )


def _adopt_existing(connection: Connection, config: Config, target: str) -> list[str]:
    """Record as done each pending revision whose tables exist already, running the others
    in order; return the revisions recorded without running them.

    ``create_schema()`` of the ledger and of the stores builds the same tables as the
    revisions but records no revision, so a plain upgrade would try to create them again.
    Which revision a database is at is read from the database itself, revision by
    revision, so this holds for every revision the package ships, later ones included.
    """
    script_directory = ScriptDirectory.from_config(config)
    environment = EnvironmentContext(config, script_directory)
    _, schema = settings_from_config(config)
    environment.configure(
        connection=connection,
        version_table=config.attributes[_VERSION_TABLE],
        version_table_schema=schema,
    )
    context = environment.get_context()
    current = context.get_current_heads()
    try:
        pending: Sequence[Script] = list(
            script_directory.iterate_revisions(target, current[0] if current else "base")
        )
    except RevisionError as exc:  # an unknown revision: what `alembic upgrade` says too
        raise CommandError(str(exc)) from exc
    adopted: list[str] = []
    previous: bool | None = True
    for script in reversed(pending):
        there = _already_there(connection, script, context)
        # A revision with nothing to do here is as far along as the one before it.
        previous = previous if there is None else there
        if previous:
            command.stamp(config, script.revision)
            adopted.append(script.revision)
            logger.info(
                "revision %s: its tables exist already (create_schema()); recorded as done",
                script.revision,
            )
        else:
            command.upgrade(config, script.revision)
    return adopted


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

    Tables that exist already, made by ``create_schema()`` (the ledger's, or a store's),
    are adopted: each revision whose tables, columns and indexes are all there is recorded
    as done instead of run, and the missing ones are created.

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

    Raises:
        alembic.util.CommandError: An unknown revision, or a revision only partly in the
            database (a table without one of its indexes, a table of that name with
            other columns): nothing was changed.
        ModuleNotFoundError: The URL's database driver is not installed; the message
            names the extra that installs it.

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
        engine = _engine(url, sa.create_engine)
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


def _engine(url: URL, make: Callable[[URL], E]) -> E:
    """``make(url)``; a missing driver's error names the extra that installs it."""
    try:
        return make(url)
    except ImportError as exc:
        hint = missing_driver(exc)
        if hint is None:
            raise
        raise ModuleNotFoundError(hint, name=exc.name) from exc


async def _upgrade_async_url(url: URL, *args: Any) -> None:
    engine = _engine(url, create_async_engine)
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
