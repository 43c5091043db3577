"""The API processes' secrets key (docs/notifications.md#the-secret-at-rest): the key file
found, or made where that is safe, before the container starts; the stored webhook secrets
checked and the clear ones sealed once it has."""

from __future__ import annotations

import logging
import stat

from adapters.postgres.engine import create_engine
from adapters.postgres.webhooks import PostgresWebhooks
from adapters.secret_box import KEYGEN, make_key_file
from application.context import Notifications
from application.webhook_secrets import box, seal_all
from domain.errors import InvalidInput
from entrypoints.containers.database import require_database
from entrypoints.settings import Settings

log = logging.getLogger("tuneplane")


async def ensure_key_file(settings: Settings, *, embedded: bool = False) -> None:
    """A key file at the settings' path, or a clear refusal. Unset TUNEPLANE_SECRETS_KEY_FILE
    means ``<state>/secrets.key``; when no file is there it is made (0600) only while the
    database holds no sealed secret: one that does was sealed under a key this process lacks
    (another host's, or a state directory that was lost), and a new key would open none."""
    path = settings.webhooks.key_path(settings.state_dir)
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning(
                "the secrets key file %s is readable by others (mode %o): chmod 600 it",
                path, mode,
            )  # fmt: skip
        return
    engine = create_engine(require_database(settings), pool_size=1)
    try:
        sealed = [i for i, s in await PostgresWebhooks(engine).secrets() if s.sealed]
    finally:
        await engine.dispose()
    if sealed:
        raise InvalidInput(
            f"no secrets key file at {path}, and {len(sealed)} webhook secrets in the database "
            "are sealed under a key: a new key would open none of them",
            fix="set TUNEPLANE_SECRETS_KEY_FILE to the key file the other API processes use "
            "(or restore it from its backup)",
            field="TUNEPLANE_SECRETS_KEY_FILE",
        )
    try:
        made = make_key_file(path)
    except OSError as exc:
        raise InvalidInput(
            f"cannot make the secrets key file {path}: {exc.strerror or exc}",
            fix=f"set TUNEPLANE_SECRETS_KEY_FILE to a key file ({KEYGEN})",
            field="TUNEPLANE_SECRETS_KEY_FILE",
        ) from None
    if made and embedded:
        log.info("made the secrets key %s (0600; keep it with the state directory)", path)
    elif made:
        log.warning(
            "made a new secrets key at %s (0600): webhook secrets are sealed under it. Every "
            "API process must use this same file (TUNEPLANE_SECRETS_KEY_FILE); keep a copy "
            "apart from the database's backups",
            path,
        )


async def seal_stored(n: Notifications) -> None:
    """Seal the clear secrets (rows from before migration 0027) and name the ones no key opens
    (their deliveries are held until the key is given): the start's check of the key."""
    report = await seal_all(n.store, box(n), rotate=False)
    if report.sealed:
        log.info("sealed %d webhook secrets kept in clear before", report.sealed)
    if report.unreadable:
        shown = ", ".join(report.unreadable[:10])
        more = f" and {len(report.unreadable) - 10} more" if len(report.unreadable) > 10 else ""
        log.error(
            "%d webhook secrets open with no key of %s: %s%s; their deliveries are held. Fix: "
            "give this process the key file they were sealed with (TUNEPLANE_SECRETS_KEY_FILE, "
            "every key, newest first), or remove those webhooks and add them again",
            len(report.unreadable), "the secrets key file", shown, more,
        )  # fmt: skip
