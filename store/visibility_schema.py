"""Visibility tables: typed search attributes per namespace, and each run's values (issue 30).

A run's custom search attributes are rows, one per attribute (one per element of a keyword list),
each holding its value in the column of its type; built-in attributes are the `runs` columns.
Every filter of the list query language then has an index: `(namespace, name, <typed value>)`
for equality, ranges, IN and prefixes (keywords compare bytewise, `COLLATE "C"`, so a prefix is
an index range), and a GIN index over the words of text values. A run without custom attributes
has no rows, so the start path writes nothing here.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from burrow.store.schema_base import NOW, TS, metadata

search_attribute_definitions = sa.Table(
    "search_attribute_definitions",
    metadata,
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    # keyword, text, int, double, bool, datetime or keyword_list (list_query_types.AttributeType)
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.PrimaryKeyConstraint("namespace", "name"),
)

TEXT_WORDS = sa.text("to_tsvector('simple'::regconfig, text_value)")
"""The words of a text value, as the GIN index holds them (visibility_sql.py names the same)."""


def _typed_index(column: str) -> sa.Index:
    return sa.Index(
        f"ix_run_search_attributes_{column}",
        "namespace",
        "name",
        column,
        postgresql_where=sa.text(f"{column} IS NOT NULL"),
    )


run_search_attributes = sa.Table(
    "run_search_attributes",
    metadata,
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    # 0 for a single value; the element's position for a keyword list.
    sa.Column("ordinal", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("keyword_value", sa.Text(collation="C"), nullable=True),
    sa.Column("int_value", sa.BigInteger, nullable=True),
    sa.Column("double_value", pg.DOUBLE_PRECISION, nullable=True),
    sa.Column("bool_value", sa.Boolean, nullable=True),
    sa.Column("datetime_value", TS, nullable=True),
    sa.Column("text_value", sa.Text, nullable=True),
    sa.PrimaryKeyConstraint("run_id", "name", "ordinal"),
    _typed_index("keyword_value"),
    _typed_index("int_value"),
    _typed_index("double_value"),
    _typed_index("bool_value"),
    _typed_index("datetime_value"),
    sa.Index(
        "ix_run_search_attributes_text_words",
        TEXT_WORDS,
        postgresql_using="gin",
        postgresql_where=sa.text("text_value IS NOT NULL"),
    ),
)
