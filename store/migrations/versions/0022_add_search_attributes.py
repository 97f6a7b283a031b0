"""search attributes: typed definitions per namespace, and each run's values as rows

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_TYPED = ("keyword_value", "int_value", "double_value", "bool_value", "datetime_value")


def upgrade() -> None:
    op.create_table(
        "search_attribute_definitions",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("namespace", "name", name="pk_search_attribute_definitions"),
    )
    op.create_table(
        "run_search_attributes",
        sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("ordinal", sa.SmallInteger(), server_default="0", nullable=False),
        sa.Column("keyword_value", sa.Text(collation="C"), nullable=True),
        sa.Column("int_value", sa.BigInteger(), nullable=True),
        sa.Column("double_value", pg.DOUBLE_PRECISION(), nullable=True),
        sa.Column("bool_value", sa.Boolean(), nullable=True),
        sa.Column("datetime_value", sa.DateTime(timezone=True), nullable=True),
        sa.Column("text_value", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", "name", "ordinal", name="pk_run_search_attributes"),
    )
    for column in _TYPED:
        op.create_index(
            f"ix_run_search_attributes_{column}",
            "run_search_attributes",
            ["namespace", "name", column],
            postgresql_where=sa.text(f"{column} IS NOT NULL"),
        )
    op.create_index(
        "ix_run_search_attributes_text_words",
        "run_search_attributes",
        [sa.text("to_tsvector('simple'::regconfig, text_value)")],
        postgresql_using="gin",
        postgresql_where=sa.text("text_value IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_table("run_search_attributes")
    op.drop_table("search_attribute_definitions")
