"""webhook secrets sealed at rest (docs/notifications.md#the-secret-at-rest):
``webhook_subscriptions`` gains ``sealed_secret`` (the HMAC key sealed with Fernet under the
secrets key, which is not in the database), and ``secret`` (clear) becomes nullable, exactly
one of the two set.

The key is not given to migrations (they run with a database URL only), so the clear secrets
of existing rows stay where they are, marked by being in ``secret``: every API process seals
them when it starts, and the deliverer seals one it meets (a row an older API process wrote
during a rolling upgrade). Downgrading is refused while any secret is sealed (this revision
cannot open them): `tp admin secrets reseal` does not unseal; remove those webhooks first.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | Sequence[str] | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("webhook_subscriptions", sa.Column("sealed_secret", sa.Text(), nullable=True))
    op.alter_column("webhook_subscriptions", "secret", nullable=True)
    op.create_check_constraint(
        op.f("ck_webhook_subscriptions_one_secret"),
        "webhook_subscriptions",
        "num_nonnulls(secret, sealed_secret) = 1",
    )


def downgrade() -> None:
    sealed = op.get_bind().scalar(
        sa.text("SELECT count(*) FROM webhook_subscriptions WHERE sealed_secret IS NOT NULL")
    )
    if sealed:
        raise RuntimeError(
            f"{sealed} webhook secrets are sealed, and revision 0026 keeps them in clear only: "
            "remove those webhooks (`tp webhook rm`) before downgrading below 0027"
        )
    op.drop_constraint(
        op.f("ck_webhook_subscriptions_one_secret"), "webhook_subscriptions", type_="check"
    )
    op.alter_column("webhook_subscriptions", "secret", nullable=False)
    op.drop_column("webhook_subscriptions", "sealed_secret")
