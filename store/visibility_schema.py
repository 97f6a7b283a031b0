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

run_memos = sa.Table(
    "run_memos",
    metadata,
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("namespace", sa.Text, nullable=False),
    # The memo after the run's last upsert: what a describe and a list show.
    sa.Column("memo", pg.JSONB, nullable=False),
    sa.PrimaryKeyConstraint("run_id"),
)


def _pattern(column: str) -> dict[str, str]:
    return {column: "text_pattern_ops"}


def runs_list_indexes() -> list[sa.Index]:
    """The `runs` indexes the list query's built-in filters and default order read (issue 30).

    Namespace first, then the filtered column, then `(created_at, run_id)`: a filter with the
    default order (newest first) and its keyset paging is one index range read in order, and a
    count an index-only scan. Keyword built-ins compare bytewise (`text_pattern_ops`, as custom
    keywords do under `COLLATE "C"`), so a STARTS_WITH is an index range too. Attributes most
    runs lack (CloseTime until the close, BuildId, the parent ids) have partial indexes, which
    cost a start nothing. RunId is the primary key; `uq_runs_open_workflow_id` is schema.py's.
    """
    return [
        sa.Index(
            "ix_runs_namespace_workflow_id_created_at",
            "namespace",
            "workflow_id",
            "created_at",
            postgresql_ops=_pattern("workflow_id"),
        ),
        sa.Index("ix_runs_namespace_created_at", "namespace", "created_at", "run_id"),
        sa.Index("ix_runs_namespace_status", "namespace", "status", "created_at", "run_id"),
        sa.Index(
            "ix_runs_namespace_workflow_type",
            "namespace",
            "workflow_type",
            "created_at",
            "run_id",
            postgresql_ops=_pattern("workflow_type"),
        ),
        sa.Index(
            "ix_runs_namespace_task_queue",
            "namespace",
            "task_queue",
            "created_at",
            "run_id",
            postgresql_ops=_pattern("task_queue"),
        ),
        sa.Index(
            "ix_runs_namespace_closed_at",
            "namespace",
            sa.text("closed_at DESC NULLS LAST"),
            sa.text("run_id DESC"),
            postgresql_where=sa.text("closed_at IS NOT NULL"),
        ),
        sa.Index(
            "ix_runs_namespace_build_id",
            "namespace",
            "build_id",
            postgresql_ops=_pattern("build_id"),
            postgresql_where=sa.text("build_id IS NOT NULL"),
        ),
        sa.Index(
            "ix_runs_namespace_parent_workflow_id",
            "namespace",
            "parent_workflow_id",
            postgresql_ops=_pattern("parent_workflow_id"),
            postgresql_where=sa.text("parent_workflow_id IS NOT NULL"),
        ),
        sa.Index(
            "ix_runs_namespace_parent_run_id",
            "namespace",
            "parent_run_id",
            postgresql_where=sa.text("parent_run_id IS NOT NULL"),
        ),
    ]
