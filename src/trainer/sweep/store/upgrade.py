"""A store written by an earlier release of this schema gains the columns added since, on any
dialect: each column of trainer.sweep.store.tables that its table lacks is added (nullable, or
NOT NULL with its server default), and each index it lacks is created, so a PostgreSQL sweep made
before a column existed opens as a sweep.db does. (Older SQLite layouts that need more than a column are tables.migrate_sqlite's.)"""

from __future__ import annotations

from sqlalchemy import Column, Connection, inspect
from sqlalchemy.schema import CreateIndex

from trainer.sweep.store.tables import metadata


def _definition(db: Connection, column: Column) -> str:
    preparer = db.dialect.identifier_preparer
    kind = column.type.compile(dialect=db.dialect)
    text = f"{preparer.quote(column.name)} {kind}"
    default = column.server_default
    if default is not None:
        text += f" DEFAULT {default.arg}"
    if not column.nullable and default is not None:
        text += " NOT NULL"
    return text


def add_missing_columns(db: Connection, schema: str | None) -> list[str]:
    """Inside the store's first transaction: add what the tables lack; the columns added."""
    found = inspect(db)
    present = set(found.get_table_names(schema=schema))
    preparer = db.dialect.identifier_preparer
    added = []
    for table in metadata.sorted_tables:
        if table.name not in present:
            continue
        have = {c["name"] for c in found.get_columns(table.name, schema=schema)}
        where = preparer.quote(table.name)
        if schema is not None:
            where = f"{preparer.quote_schema(schema)}.{where}"
        for column in table.columns:
            if column.name not in have:
                db.exec_driver_sql(f"ALTER TABLE {where} ADD COLUMN {_definition(db, column)}")
                added.append(f"{table.name}.{column.name}")
    return added


def add_missing_indexes(db: Connection) -> None:
    """Inside the store's first transaction, after its tables exist: create the indexes of
    trainer.sweep.store.tables that a store made before them lacks (IF NOT EXISTS)."""
    for table in metadata.sorted_tables:
        for index in table.indexes:
            db.execute(CreateIndex(index, if_not_exists=True))
