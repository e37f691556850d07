"""Alembic migrations on SQLite and PostgreSQL: head is exactly the ORM's and Optuna's tables, base is empty."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from optuna.storages._rdb.models import BaseModel as OptunaBase
from sqlalchemy import inspect

import kpl_lab.catalog.alerts  # noqa: F401  (registers the alert tables)
import kpl_lab.catalog.annotation  # noqa: F401  (registers the annotation tables)
import kpl_lab.catalog.audit  # noqa: F401  (registers the audit log)
import kpl_lab.catalog.deployments  # noqa: F401  (registers the deployment tables)
import kpl_lab.catalog.experiments  # noqa: F401  (registers the experiment tables)
import kpl_lab.catalog.jobs  # noqa: F401  (registers the job tables)
import kpl_lab.catalog.models  # noqa: F401
import kpl_lab.catalog.pipelines  # noqa: F401  (registers the pipeline run tables)
import kpl_lab.catalog.rules  # noqa: F401  (registers the rules table)
import kpl_lab.catalog.usage  # noqa: F401  (registers the usage history)
from kpl_lab.catalog.db import Base
from kpl_lab.catalog.migrate import HEAD, alembic_config, current_revision, head_revision, upgrade
from kpl_lab.platform import Platform

pytestmark = pytest.mark.databases
# Optuna's study storage, created by 0006_experiments in the same database (docs/experiments.md)
OPTUNA_TABLES = set(OptunaBase.metadata.tables)


def ours(name, type_, *_args) -> bool:
    """Say whether a schema object is ours to compare (Optuna's tables are Optuna's)."""
    return not (type_ == "table" and name in OPTUNA_TABLES)


def test_migrated_schema_matches_the_models(platform):
    with platform.engine.connect() as conn:
        assert current_revision(conn) == head_revision()
        tables = set(inspect(conn).get_table_names()) - {"alembic_version"}
        assert not OPTUNA_TABLES & set(Base.metadata.tables)  # no name clash
        assert tables == set(Base.metadata.tables) | OPTUNA_TABLES
        context = MigrationContext.configure(conn, opts={"compare_type": True, "include_name": ours})
        diff = compare_metadata(context, Base.metadata)
    assert diff == []


def test_upgrade_is_idempotent(tmp_path, empty_database_url):
    for _ in range(2):
        plat = Platform(home=str(tmp_path), database_url=empty_database_url)
        with plat.engine.connect() as conn:
            assert current_revision(conn) == head_revision()
        plat.close()


def test_upgrade_to_head_and_downgrade_to_base(tmp_path, empty_database_url):
    plat = Platform(home=str(tmp_path), database_url=empty_database_url)
    engine = plat.engine  # upgraded to head on first use
    try:
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "base")
        with engine.connect() as conn:
            assert current_revision(conn) is None
            assert set(inspect(conn).get_table_names()) <= {"alembic_version"}
        upgrade(engine)
        with engine.connect() as conn:
            assert current_revision(conn) == head_revision()
            tables = set(inspect(conn).get_table_names()) - {"alembic_version"}
            assert tables == set(Base.metadata.tables) | OPTUNA_TABLES
    finally:
        plat.close()


def test_concurrent_first_use(tmp_path, empty_database_url):
    code = (
        "import sys; from kpl_lab.platform import Platform; "
        "p = Platform(home=sys.argv[1], database_url=sys.argv[2]); p.engine; p.close()"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path), empty_database_url], stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    errors = [proc.communicate()[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], errors


def test_a_database_at_head_opens_without_alembic(tmp_path, empty_database_url):
    """HEAD names the newest script; a platform whose database is there never imports Alembic."""
    assert head_revision() == HEAD
    first = Platform(home=str(tmp_path), database_url=empty_database_url)
    first.engine  # noqa: B018  (upgraded to head)
    first.close()
    code = (
        "import sys; from kpl_lab.platform import Platform; "
        "p = Platform(home=sys.argv[1], database_url=sys.argv[2]); p.engine; p.close(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))"
    )
    opened = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), empty_database_url], capture_output=True, text=True
    )
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == "[]"


def test_schema_compiles_for_postgresql():
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.schema import CreateIndex, CreateTable

    dialect = postgresql.dialect()
    for table in Base.metadata.sorted_tables:
        ddl = str(CreateTable(table).compile(dialect=dialect))
        assert "JSON" in ddl or not any(str(c.type) == "JSON" for c in table.columns)
        for index in table.indexes:
            CreateIndex(index).compile(dialect=dialect)
