"""audit_chain: every ``admin_audit_log`` row is a link of one hash chain per database.

Each row gets ``seq`` (its place in the chain: 1, 2, 3, … with no gap), ``prev_hash`` (the
``row_hash`` of the row before it, or of the chain's tail anchor) and ``row_hash`` =
SHA-256(``prev_hash`` ‖ the row's content), where the content is the row as JSON
(``to_jsonb`` in UTC, the three chain columns and the columns that are NULL left out; jsonb's key
order) encoded in UTF-8. ``admin_audit_chain`` is one row: the chain's head (the newest row's
``seq`` and ``row_hash``) and its tail anchor (the last row retention deleted; seq 0 and 32 zero
bytes until it first deletes one).

The database links every row itself, in a ``BEFORE INSERT`` trigger: it locks the chain row
(``SELECT … FOR UPDATE``, held until the inserting transaction ends), takes the head, computes the
row's hash and moves the head, all inside the one ``INSERT`` statement. Two writers never link to
the same head (the second waits for the first to commit and then reads the head it left; in a
snapshot older than that head, PostgreSQL refuses the lock instead of forking), and a writer that
rolls back takes its link with it. Values a writer gives for the chain columns are overwritten.
That is also how a mixed fleet stays one chain: the previous release's replicas keep inserting
rows without knowing the columns, and the trigger links those like any other, so ``verify``
treats them no differently.

A second trigger refuses every ``UPDATE`` of a row: the log is append-only. This release never
updates a row (a status the call answered after its change committed is a chained row of its own,
``detail.corrects``); the previous release corrects a status with an ``UPDATE`` that the trigger
refuses, so during a rollout such a row keeps the route's success status (its replica logs that
the audit write failed, and the answer stands).

Existing rows are chained here, oldest first (``at``, then ``id``), under an exclusive lock on the
table (reads go on; the previous release's audit writes wait for the backfill).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# The row's content as hashed: the same expression as ``service.db.audit.content_sql`` (verify's).
# Frozen here, as a migration must be; the chain tests prove the two agree.
_CONTENT = (
    "convert_to(coalesce((SELECT jsonb_object_agg(e.key, e.value) FROM jsonb_each(to_jsonb({row})) e"
    " WHERE e.key NOT IN ('seq', 'prev_hash', 'row_hash') AND e.value <> 'null'::jsonb),"
    " '{{}}'::jsonb)::text, 'UTF8')"
)

# The row variables are `record`, not the tables' row types: an offline script (--sql) renders the
# percent sign of that syntax doubled, which PostgreSQL refuses.
_APPEND = f"""
CREATE FUNCTION admin_audit_chain_append() RETURNS trigger LANGUAGE plpgsql SET TimeZone = 'UTC' AS $$
DECLARE
    head record;
BEGIN
    SELECT * INTO STRICT head FROM admin_audit_chain FOR UPDATE;
    NEW.seq := head.head_seq + 1;
    NEW.prev_hash := head.head_hash;
    NEW.row_hash := sha256(NEW.prev_hash || {_CONTENT.format(row="NEW")});
    UPDATE admin_audit_chain SET head_seq = NEW.seq, head_hash = NEW.row_hash;
    RETURN NEW;
END $$
"""
_APPEND_TRIGGER = (
    "CREATE TRIGGER admin_audit_chain_append BEFORE INSERT ON admin_audit_log "
    "FOR EACH ROW EXECUTE FUNCTION admin_audit_chain_append()"
)
_APPEND_ONLY = """
CREATE FUNCTION admin_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'admin_audit_log is append-only: a row is never updated'
        USING ERRCODE = 'insufficient_privilege';
END $$
"""
_APPEND_ONLY_TRIGGER = (
    "CREATE TRIGGER admin_audit_append_only BEFORE UPDATE ON admin_audit_log "
    "FOR EACH ROW EXECUTE FUNCTION admin_audit_append_only()"
)

_BACKFILL = f"""
DO $$
DECLARE
    entry record;
    link bytea := decode(repeat('00', 32), 'hex');
    position bigint := 0;
BEGIN
    FOR entry IN SELECT * FROM admin_audit_log ORDER BY at, id LOOP
        position := position + 1;
        UPDATE admin_audit_log
           SET seq = position, prev_hash = link, row_hash = sha256(link || {_CONTENT.format(row="entry")})
         WHERE id = entry.id
        RETURNING row_hash INTO link;
    END LOOP;
    UPDATE admin_audit_chain SET head_seq = position, head_hash = link;
END $$
"""


def upgrade() -> None:
    op.create_table(
        "admin_audit_chain",
        sa.Column("one", sa.Boolean(), primary_key=True, server_default=sa.text("true")),
        sa.Column("head_seq", sa.BigInteger(), nullable=False),
        sa.Column("head_hash", postgresql.BYTEA(), nullable=False),
        sa.Column("tail_seq", sa.BigInteger(), nullable=False),
        sa.Column("tail_hash", postgresql.BYTEA(), nullable=False),
        sa.CheckConstraint("one", name=op.f("ck_admin_audit_chain_one")),
    )
    op.execute(
        "INSERT INTO admin_audit_chain (one, head_seq, head_hash, tail_seq, tail_hash) "
        "VALUES (true, 0, decode(repeat('00', 32), 'hex'), 0, decode(repeat('00', 32), 'hex'))"
    )
    op.execute("LOCK TABLE admin_audit_log IN EXCLUSIVE MODE")
    op.add_column("admin_audit_log", sa.Column("seq", sa.BigInteger()))
    op.add_column("admin_audit_log", sa.Column("prev_hash", postgresql.BYTEA()))
    op.add_column("admin_audit_log", sa.Column("row_hash", postgresql.BYTEA()))
    op.execute("SET LOCAL TimeZone = 'UTC'")
    op.execute(_BACKFILL)
    for column in ("seq", "prev_hash", "row_hash"):
        op.alter_column("admin_audit_log", column, nullable=False)
    op.create_unique_constraint(op.f("uq_admin_audit_log_seq"), "admin_audit_log", ["seq"])
    op.execute(_APPEND)
    op.execute(_APPEND_TRIGGER)
    op.execute(_APPEND_ONLY)
    op.execute(_APPEND_ONLY_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER admin_audit_append_only ON admin_audit_log")
    op.execute("DROP FUNCTION admin_audit_append_only()")
    op.execute("DROP TRIGGER admin_audit_chain_append ON admin_audit_log")
    op.execute("DROP FUNCTION admin_audit_chain_append()")
    op.drop_constraint(op.f("uq_admin_audit_log_seq"), "admin_audit_log", type_="unique")
    for column in ("row_hash", "prev_hash", "seq"):
        op.drop_column("admin_audit_log", column)
    op.drop_table("admin_audit_chain")
