"""The shipped Alembic migration builds the same table as create_schema()."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from notifyonce import Ledger, migrations

from ._databases import Backend


def _shape(inspector: Any, table: str) -> dict[str, Any]:
    """Columns, types, nullability, keys and indexes, with the table name taken out."""

    def strip(name: str | None) -> str | None:
        return None if name is None else name.replace(table, "T")

    columns = [
        (c["name"], repr(c["type"]), c["nullable"], bool(c.get("autoincrement")))
        for c in inspector.get_columns(table)
    ]
    pk = inspector.get_pk_constraint(table)
    uniques = sorted(
        (strip(u["name"]), tuple(u["column_names"]))
        for u in inspector.get_unique_constraints(table)
    )
    indexes = sorted(
        (strip(i["name"]), tuple(i["column_names"]), bool(i["unique"]))
        for i in inspector.get_indexes(table)
    )
    return {
        "columns": columns,
        "pk": tuple(pk["constrained_columns"]),
        "uniques": uniques,
        "indexes": indexes,
    }


@pytest.fixture
def tables(sync_backend: Backend) -> Iterator[tuple[Backend, str, str]]:
    """Two fresh table names on each database; both and their version tables dropped after."""
    created, migrated = sync_backend.unique_table(), sync_backend.unique_table()
    yield sync_backend, created, migrated
    engine = sa.create_engine(sync_backend.sync_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        for name in (
            created,
            migrated,
            migrations.default_version_table(migrated),
            f"{created}_rate",
            f"{migrated}_rate_limits",
            f"{created}_files",
            f"{migrated}_file_ids",
            f"{created}_recipients",
            f"{migrated}_recipients",
            f"{created}_digest_events",
            f"{migrated}_digest_events",
            f"{created}_cap_seats",
            f"{migrated}_cap_seats",
        ):
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))
    engine.dispose()


def test_migration_builds_the_same_table_as_create_schema(
    tables: tuple[Backend, str, str],
) -> None:
    """Columns, types, nullability, primary key, unique constraint and indexes all match."""
    backend, created, migrated = tables
    engine = sa.create_engine(backend.sync_url)
    try:
        Ledger(engine, table_name=created).create_schema()
        migrations.upgrade(engine, table_name=migrated)
        migrations.upgrade(engine, table_name=migrated)  # a second run is a no-op
        inspector = sa.inspect(engine)
        assert _shape(inspector, created) == _shape(inspector, migrated)
        assert migrations.default_version_table(migrated) in inspector.get_table_names()
        ledger = Ledger(engine, table_name=migrated)
        claim = ledger.claim_slot("a", 1, dt.date(2026, 12, 1))
        assert None is ledger.claim_slot("a", 1, dt.date(2026, 12, 1))
        assert claim is not None
        assert ledger.mark_sent(claim)
    finally:
        engine.dispose()


def test_migration_builds_the_same_rate_table_as_create_schema(
    tables: tuple[Backend, str, str],
) -> None:
    """Revision 0002 builds SQLRateStore's table as create_schema() does, beside the ledger."""
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce.ratelimit import SQLRateStore

    backend, created, migrated = tables

    async def create() -> None:
        async_engine = create_async_engine(backend.async_url)
        try:
            await SQLRateStore(async_engine, table_name=f"{created}_rate").create_schema()
        finally:
            await async_engine.dispose()

    asyncio.run(create())
    engine = sa.create_engine(backend.sync_url)
    try:
        migrations.upgrade(engine, table_name=migrated)
        inspector = sa.inspect(engine)
        expected = _shape(inspector, f"{created}_rate")
        actual = _shape(inspector, f"{migrated}_rate_limits")
        assert expected["columns"] == actual["columns"]
        assert expected["pk"] == actual["pk"] == ("scope",)
        assert expected["indexes"] == actual["indexes"]
    finally:
        engine.dispose()


def test_migration_builds_the_same_file_id_table_as_create_schema(
    tables: tuple[Backend, str, str],
) -> None:
    """Revision 0003 builds SQLFileIdStore's table as create_schema() does, beside the ledger."""
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce.telegram import SQLFileIdStore

    backend, created, migrated = tables

    async def create_and_use() -> str | None:
        async_engine = create_async_engine(backend.async_url)
        try:
            await SQLFileIdStore(async_engine, table_name=f"{created}_files").create_schema()
            store = SQLFileIdStore(async_engine, table_name=f"{migrated}_file_ids")
            await store.put("1:photo:ab", "first")
            await store.put("1:photo:ab", "second")  # a second writer keeps the first id
            return await store.get("1:photo:ab")
        finally:
            await async_engine.dispose()

    engine = sa.create_engine(backend.sync_url)
    try:
        migrations.upgrade(engine, table_name=migrated)
        assert "first" == asyncio.run(create_and_use())
        inspector = sa.inspect(engine)
        expected = _shape(inspector, f"{created}_files")
        actual = _shape(inspector, f"{migrated}_file_ids")
        assert expected["columns"] == actual["columns"]
        assert expected["pk"] == actual["pk"] == ("file_key",)
        assert expected["indexes"] == actual["indexes"]
    finally:
        engine.dispose()


def test_migration_builds_the_same_recipients_table_as_create_schema(
    tables: tuple[Backend, str, str],
) -> None:
    """Revision 0007 builds the audience's table as the ledger's create_schema() does,
    beside the ledger table, and an audience works on it."""
    from notifyonce import Audience

    backend, created, migrated = tables
    engine = sa.create_engine(backend.sync_url)
    try:
        Ledger(engine, table_name=created).create_schema()
        migrations.upgrade(engine, table_name=migrated)
        inspector = sa.inspect(engine)
        expected = _shape(inspector, f"{created}_recipients")
        actual = _shape(inspector, f"{migrated}_recipients")
        assert expected == actual
        assert ("recipient", "category") == actual["pk"]
        audience = Audience.beside(Ledger(engine, table_name=migrated))
        audience.mark_gone(42, "blocked")
        audience.mark_gone(42, "blocked")
        assert {"blocked": 1} == audience.counts().gone
    finally:
        engine.dispose()


def test_migration_builds_the_same_digest_and_cap_tables_as_create_schema(
    tables: tuple[Backend, str, str],
) -> None:
    """Revision 0008 builds the digest events and cap seats tables as the ledger's
    create_schema() does, beside the ledger table."""
    backend, created, migrated = tables
    engine = sa.create_engine(backend.sync_url)
    try:
        Ledger(engine, table_name=created).create_schema()
        migrations.upgrade(engine, table_name=migrated)
        inspector = sa.inspect(engine)
        for suffix in ("digest_events", "cap_seats"):
            expected = _shape(inspector, f"{created}_{suffix}")
            actual = _shape(inspector, f"{migrated}_{suffix}")
            assert expected == actual
    finally:
        engine.dispose()


def test_migration_runs_inside_the_callers_connection(tables: tuple[Backend, str, str]) -> None:
    """upgrade(connection) uses the caller's transaction, as an app's env.py would call it."""
    backend, _, migrated = tables
    engine = sa.create_engine(backend.sync_url)
    try:
        with engine.begin() as conn:
            migrations.upgrade(conn, table_name=migrated)
        assert migrated in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_schema_option_places_table_and_version_table_in_the_schema() -> None:
    """With schema=, the ledger, create_schema and the migration all use that schema."""
    from ._databases import make_backend

    backend = make_backend("postgres-psycopg", None)  # type: ignore[arg-type]
    schema = backend.unique_table().replace("nfo_t_", "nfo_s_")
    engine = sa.create_engine(backend.sync_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
        migrations.upgrade(engine, table_name="slots_m", schema=schema)
        ledger = Ledger(engine, table_name="slots_c", schema=schema)
        ledger.create_schema()
        assert ledger.claim_slot("a", 1, "c") is not None
        migrated = Ledger(engine, table_name="slots_m", schema=schema)
        assert migrated.claim_slot("a", 1, "c") is not None
        names = set(sa.inspect(engine).get_table_names(schema=schema))
        expected = {"slots_c", "slots_m", "slots_m_alembic_version", "slots_m_rate_limits"}
        recipients = {"slots_c_recipients", "slots_m_recipients"}
        side = {f"slots_{x}_{t}" for x in "cm" for t in ("digest_events", "cap_seats")}
        assert expected | {"slots_m_file_ids"} | recipients | side == names
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        engine.dispose()


_APP_ENV = """
from alembic import context
import sqlalchemy as sa
import notifyonce.migrations

config = context.config
engine = sa.create_engine(config.get_main_option("sqlalchemy.url"))
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()
        if config.get_main_option("call_notifyonce") == "yes":
            notifyonce.migrations.upgrade(connection, table_name="app_slots")
engine.dispose()
"""

_APP_REVISION = """
revision = "app_0001"
down_revision = None
branch_labels = None
depends_on = None

from alembic import op
import sqlalchemy as sa


def upgrade():
    op.create_table("app_users", sa.Column("id", sa.Integer, primary_key=True))
"""


def _app_config(tmp_path: Any, option_b: bool) -> Any:
    from alembic.config import Config

    versions = tmp_path / "versions"
    versions.mkdir()
    (tmp_path / "env.py").write_text(_APP_ENV)
    (versions / "app_0001.py").write_text(_APP_REVISION)
    config = Config()
    config.set_main_option("script_location", str(tmp_path))
    config.set_main_option("sqlalchemy.url", f"sqlite:///{tmp_path / 'app.sqlite3'}")
    if option_b:
        config.set_main_option("path_separator", "space")
        config.set_main_option("version_locations", f"{versions} notifyonce:migrations/versions")
        config.set_main_option("notifyonce_table_name", "app_slots")
    else:
        config.set_main_option("call_notifyonce", "yes")
    return config


@pytest.mark.sqlite
@pytest.mark.parametrize("option_b", [False, True], ids=["env-py-call", "version-locations"])
def test_an_apps_alembic_history_can_include_ours(tmp_path: Any, option_b: bool) -> None:
    """Both documented ways of running our migration from an app's Alembic setup work."""
    from alembic import command

    config = _app_config(tmp_path, option_b)
    command.upgrade(config, "heads")
    command.upgrade(config, "heads")  # idempotent
    engine = sa.create_engine(config.get_main_option("sqlalchemy.url"))
    try:
        names = set(sa.inspect(engine).get_table_names())
        ours = "alembic_version" if option_b else "app_slots_alembic_version"
        assert {"app_users", "app_slots", "alembic_version", ours} <= names
        assert Ledger(engine, table_name="app_slots").claim_slot("a", 1, "c") is not None
    finally:
        engine.dispose()


# -- adopting tables made by create_schema() ----------------------------------------------


def _revisions() -> list[str]:
    """Every revision the package ships, oldest first."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", migrations.SCRIPT_LOCATION)
    walked = ScriptDirectory.from_config(config).walk_revisions()
    return [script.revision for script in reversed(list(walked))]


REVISIONS = _revisions()
HEAD = REVISIONS[-1]


@pytest.fixture
def ledger_table(sync_backend: Backend) -> Iterator[tuple[Backend, str]]:
    """A fresh ledger table name on each database; it, its side tables and its version
    table are dropped afterwards."""
    from notifyonce._cli.common import ledger_tables

    table = sync_backend.unique_table()
    yield sync_backend, table
    engine = sa.create_engine(sync_backend.sync_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        for name in [*ledger_tables(table), migrations.default_version_table(table)]:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))
    engine.dispose()


def _recorded(engine: sa.Engine, table: str) -> list[str]:
    from alembic.runtime.migration import MigrationContext

    options = {"version_table": migrations.default_version_table(table)}
    with engine.connect() as conn:
        return list(MigrationContext.configure(conn, opts=options).get_current_heads())


def test_migrate_adopts_a_ledger_table_made_by_create_schema(
    ledger_table: tuple[Backend, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`notifyonce migrate` after create_schema() records the ledger's revision as done,
    creates the tables beside it, keeps the rows, and a second run has nothing to do."""
    from notifyonce._cli import main
    from notifyonce._cli.common import ledger_tables

    backend, table = ledger_table
    engine = sa.create_engine(backend.sync_url)
    try:
        ledger = Ledger(engine, table_name=table)
        ledger.create_schema()
        claim = ledger.claim_slot("trial_6h", 42, "c1")
        assert claim is not None
        ledger.mark_sent(claim)
        capsys.readouterr()
        args = ["migrate", "--database-url", backend.sync_url, "--table", table]
        assert 0 == main(args)
        first = capsys.readouterr().out
        assert 0 == main(args)
        second = capsys.readouterr().out
        assert [HEAD] == _recorded(engine, table)
        assert set(ledger_tables(table)) <= set(sa.inspect(engine).get_table_names())
        assert None is ledger.claim_slot("trial_6h", 42, "c1")  # the row is still there
    finally:
        engine.dispose()
    assert f"recorded as done without running: {REVISIONS[0]}" in first
    assert f"is already at {HEAD}: nothing to do" in second


# Revisions with nothing to do on a database: the (action, sent_at) index made partial,
# where there are no partial indexes.
NOTHING_TO_DO = {"mysql": {"notifyonce_0006"}}


@pytest.mark.parametrize("reached", REVISIONS)
def test_upgrade_adopts_tables_left_at_each_revision_without_a_record(
    ledger_table: tuple[Backend, str], reached: str
) -> None:
    """Tables as a revision left them, with no revision recorded (what create_schema()
    leaves): upgrade records what is there, creates the rest, and reaches the head."""
    backend, table = ledger_table
    engine = sa.create_engine(backend.sync_url)
    try:
        migrations.upgrade(engine, table_name=table, revision=reached)
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE {migrations.default_version_table(table)}"))
        with engine.begin() as conn:
            adopted = migrations._upgrade_on(conn, table, None, None, "heads")
        expected = REVISIONS[: REVISIONS.index(reached) + 1]
        # A revision that does nothing on this database is there as soon as the one
        # before it is.
        for later in REVISIONS[len(expected) :]:
            if later not in NOTHING_TO_DO.get(backend.dialect, ()):
                break
            expected.append(later)
        assert expected == adopted
        assert [HEAD] == _recorded(engine, table)
        migrations.upgrade(engine, table_name=table)  # nothing left to do
        assert Ledger(engine, table_name=table).claim_slot("a", 1, "c") is not None
    finally:
        engine.dispose()


def test_upgrade_adopts_a_store_table_made_after_the_last_recorded_revision(
    ledger_table: tuple[Backend, str],
) -> None:
    """Recorded at the first revision, with a later revision's table made by a store's
    create_schema(): that revision is recorded as done, the others run."""
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce.ratelimit import SQLRateStore

    backend, table = ledger_table
    engine = sa.create_engine(backend.sync_url)

    async def create_rate_table() -> None:
        async_engine = create_async_engine(backend.async_url)
        try:
            await SQLRateStore(async_engine, table_name=f"{table}_rate_limits").create_schema()
        finally:
            await async_engine.dispose()

    try:
        migrations.upgrade(engine, table_name=table, revision=REVISIONS[0])
        asyncio.run(create_rate_table())
        with engine.begin() as conn:
            adopted = migrations._upgrade_on(conn, table, None, None, "heads")
        assert ["notifyonce_0002"] == adopted
        assert [HEAD] == _recorded(engine, table)
    finally:
        engine.dispose()


def test_a_revision_only_partly_there_is_refused_and_nothing_changes(
    ledger_table: tuple[Backend, str],
) -> None:
    """A ledger table without one of its indexes is neither recorded nor run over: the
    error names what is there and what is missing, and no revision is recorded."""
    from alembic.util import CommandError

    from notifyonce._ledger.table import index_names

    backend, table = ledger_table
    engine = sa.create_engine(backend.sync_url)
    try:
        Ledger(engine, table_name=table).create_schema()
        index = index_names(table)["subject_sent"]
        with engine.begin() as conn:
            on = f" ON {table}" if backend.dialect == "mysql" else ""
            conn.execute(sa.text(f"DROP INDEX {index}{on}"))
        with pytest.raises(CommandError) as info:
            migrations.upgrade(engine, table_name=table)
        assert [] == _recorded(engine, table)
    finally:
        engine.dispose()
    assert f"index {index} on {table} do not" in str(info.value)
    assert "nothing was changed" in str(info.value)


def test_a_foreign_table_of_the_same_name_is_refused(ledger_table: tuple[Backend, str]) -> None:
    """A table named like the ledger's but with other columns is not taken for it."""
    from alembic.util import CommandError

    backend, table = ledger_table
    engine = sa.create_engine(backend.sync_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, note TEXT)"))
        with pytest.raises(CommandError, match="lacks the columns action, attempt"):
            migrations.upgrade(engine, table_name=table)
    finally:
        engine.dispose()


def _action_index_is_partial(engine: sa.Engine, table: str) -> bool:
    from notifyonce._ledger.table import index_names

    name = index_names(table)["action_sent"]
    [index] = [i for i in sa.inspect(engine).get_indexes(table) if i["name"] == name]
    return any(k.endswith("_where") for k in index.get("dialect_options", {}))


def test_the_action_index_holds_only_sent_rows_after_migrate_and_create_schema(
    ledger_table: tuple[Backend, str],
) -> None:
    """Revision 0006 makes the (action, sent_at) index partial where the database has
    partial indexes (PostgreSQL, SQLite), and create_schema() does the same to a table an
    earlier release made; MySQL keeps the index as it is."""
    from notifyonce._ledger.table import index_names

    backend, table = ledger_table
    partial = backend.dialect in ("postgresql", "sqlite")
    engine = sa.create_engine(backend.sync_url)
    try:
        migrations.upgrade(engine, table_name=table, revision="notifyonce_0005")
        assert not _action_index_is_partial(engine, table)
        migrations.upgrade(engine, table_name=table)
        assert partial == _action_index_is_partial(engine, table)
        name = index_names(table)["action_sent"]
        with engine.begin() as conn:  # the index as 0.2.0's create_schema() made it
            conn.execute(sa.text(f"DROP INDEX {name}" + (f" ON {table}" if not partial else "")))
            conn.execute(sa.text(f"CREATE INDEX {name} ON {table} (action, sent_at)"))
        assert not _action_index_is_partial(engine, table)
        Ledger(engine, table_name=table).create_schema()
        assert partial == _action_index_is_partial(engine, table)
    finally:
        engine.dispose()
