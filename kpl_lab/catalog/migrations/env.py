"""Alembic environment: migrate the connection the platform hands over."""

from __future__ import annotations

from alembic import context

import kpl_lab.catalog.alerts  # noqa: F401  (registers the alert tables)
import kpl_lab.catalog.audit  # noqa: F401  (registers the audit log)
import kpl_lab.catalog.deployments  # noqa: F401  (registers the deployment tables)
import kpl_lab.catalog.experiments  # noqa: F401  (registers the experiment tables)
import kpl_lab.catalog.jobs  # noqa: F401  (registers the job and ledger tables)
import kpl_lab.catalog.models  # noqa: F401  (registers the catalog tables)
import kpl_lab.catalog.pipelines  # noqa: F401  (registers the pipeline run tables)
import kpl_lab.catalog.rules  # noqa: F401  (registers the rules)
import kpl_lab.catalog.usage  # noqa: F401  (registers the usage history)
from kpl_lab.catalog.db import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    """Run migrations on the connection in `config.attributes`, or one made from the URL."""
    connection = config.attributes.get("connection")
    if connection is None:
        from sqlalchemy import create_engine

        engine = create_engine(config.get_main_option("sqlalchemy.url"))
        with engine.connect() as connection, connection.begin():
            _run(connection)
        engine.dispose()
    else:
        _run(connection)


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite alters tables by copying them
        transactional_ddl=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported: run them against a database")
run_migrations_online()
