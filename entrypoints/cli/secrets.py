"""`tp admin secrets …`: the key webhook signing secrets are sealed under
(docs/notifications.md#the-secret-at-rest). An operator's commands, run where the API runs:
`keygen` prints a new key; `reseal` works on the database directly (TUNEPLANE_DATABASE_URL)
with the key file (TUNEPLANE_SECRETS_KEY_FILE), so it needs no server and no token."""

from __future__ import annotations

import asyncio
from typing import Annotated

from cyclopts import App, Parameter

from domain.errors import Unavailable
from entrypoints.cli import output

secrets_app = App(
    name="secrets", help="The key webhook secrets are sealed under: make one, re-seal with it."
)
JsonFlag = Annotated[bool, Parameter(name="--json", help="Print JSON for scripts.")]


@secrets_app.command(name="keygen")
def keygen() -> int:
    """Print a new secrets key (a Fernet key: 32 random bytes, URL-safe base64). Make a key
    file with `tp admin secrets keygen > FILE && chmod 600 FILE`; to rotate, put the new key
    as the FIRST line of the key file every API process reads (keep the old lines), restart
    them, then run `tp admin secrets reseal`, then drop the old lines."""
    from adapters.secret_box import new_key

    output.out.print(new_key(), markup=False)
    return 0


@secrets_app.command(name="reseal")
def reseal(*, json: JsonFlag = False) -> int:
    """Seal every webhook secret again under the newest key of the key file
    (TUNEPLANE_SECRETS_KEY_FILE, default STATE/secrets.key), on the database directly
    (TUNEPLANE_DATABASE_URL); clear ones (from before migration 0027) are sealed too. The
    secrets themselves do not change: receivers notice nothing. Idempotent; safe while the
    API runs. Fails (exit 6) if some secret opens with no key of the file, naming them."""
    from adapters.postgres.engine import create_engine
    from adapters.postgres.webhooks import PostgresWebhooks
    from adapters.secret_box import read_key_file
    from application.webhook_secrets import SealReport, seal_all
    from entrypoints.containers.database import reach_database
    from entrypoints.settings import Settings

    settings = Settings.from_env()
    box = read_key_file(settings.webhooks.key_path(settings.state_dir))

    async def run() -> SealReport:
        url = await reach_database(settings)
        engine = create_engine(url, pool_size=1)
        try:
            return await seal_all(PostgresWebhooks(engine), box, rotate=True)
        finally:
            await engine.dispose()

    report = asyncio.run(run())
    if json:
        output.print_json(
            {
                "resealed": report.resealed,
                "sealed": report.sealed,
                "unreadable": list(report.unreadable),
            }
        )
    else:
        output.out.print(
            f"resealed {report.resealed} webhook secrets under the newest key; sealed "
            f"{report.sealed} kept in clear before",
            markup=False,
        )
    if report.unreadable:
        raise Unavailable(
            f"{len(report.unreadable)} webhook secrets open with no key of the key file: "
            + ", ".join(report.unreadable[:20]),
            fix="add the key they were sealed with to the key file (after the newest) and run "
            "this again, or remove those webhooks (`tp webhook rm ID`) and add them again",
        )
    return 0
