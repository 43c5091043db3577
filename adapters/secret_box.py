"""Secrets sealed at rest with Fernet (``cryptography``: AES-128-CBC and HMAC-SHA256,
authenticated, with a version byte and a timestamp), under keys read from a key file that is
not in the database (docs/notifications.md#the-secret-at-rest).

The key file holds one Fernet key per line, newest first (blank lines and ``#`` comments are
skipped): the newest seals, every one opens (``MultiFernet``), so keys can be rotated: add a
new first line on every API process, restart them, `tp admin secrets reseal`, then drop the
old line."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from domain.errors import InvalidInput
from domain.secret_ports import SecretUnreadable

KEYGEN = "`tp admin secrets keygen > FILE` (chmod 600 FILE)"
MAX_KEY_FILE_BYTES = 64 * 1024


class FernetSecretBox:
    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise InvalidInput("no secrets key given", fix=f"make one with {KEYGEN}")
        self._fernet = MultiFernet([Fernet(k) for k in keys])

    def seal(self, clear: str) -> str:
        return self._fernet.encrypt(clear.encode("utf-8")).decode("ascii")

    def open(self, sealed: str) -> str:
        try:
            return self._fernet.decrypt(sealed.encode("ascii")).decode("utf-8")
        except (InvalidToken, UnicodeError) as exc:
            raise _unreadable() from exc

    def reseal(self, sealed: str) -> str:
        try:
            return self._fernet.rotate(sealed.encode("ascii")).decode("ascii")
        except (InvalidToken, UnicodeError) as exc:
            raise _unreadable() from exc


def _unreadable() -> SecretUnreadable:
    return SecretUnreadable(
        "no secrets key opens it (a key missing from the key file, or the stored value altered)",
        fix="give every API process the key file it was sealed with "
        "(TUNEPLANE_SECRETS_KEY_FILE, every key newest first), or remove the webhook and add "
        "it again",
    )


def new_key() -> str:
    """A fresh Fernet key (32 random bytes, URL-safe base64): one line of a key file."""
    return Fernet.generate_key().decode("ascii")


def parse_keys(text: str, where: str) -> list[bytes]:
    """The keys of a key file's text, newest first; InvalidInput naming the bad line."""
    keys: list[bytes] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            Fernet(line.encode("ascii"))
        except (ValueError, UnicodeError):
            raise InvalidInput(
                f"line {number} of the secrets key file {where} is not a Fernet key "
                "(44 characters of URL-safe base64)",
                fix=f"write one key per line, newest first; make one with {KEYGEN}",
                field="TUNEPLANE_SECRETS_KEY_FILE",
            ) from None
        keys.append(line.encode("ascii"))
    if not keys:
        raise InvalidInput(
            f"the secrets key file {where} holds no key",
            fix=f"write one key per line, newest first; make one with {KEYGEN}",
            field="TUNEPLANE_SECRETS_KEY_FILE",
        )
    return keys


def read_key_file(path: Path) -> FernetSecretBox:
    """The box of the key file at ``path``; InvalidInput if it is missing or not a key file."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_KEY_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InvalidInput(
            f"no secrets key file at {path}",
            fix=f"set TUNEPLANE_SECRETS_KEY_FILE to the key file every API process shares, or "
            f"make one with {KEYGEN}",
            field="TUNEPLANE_SECRETS_KEY_FILE",
        ) from None
    except OSError as exc:
        raise InvalidInput(
            f"cannot read the secrets key file {path}: {exc.strerror}",
            fix="make it readable by the user the API runs as (and by no one else: chmod 600)",
            field="TUNEPLANE_SECRETS_KEY_FILE",
        ) from None
    if len(raw) > MAX_KEY_FILE_BYTES:
        raise InvalidInput(
            f"the secrets key file {path} is over {MAX_KEY_FILE_BYTES} bytes: not a key file",
            fix=f"name the key file (one key per line); make one with {KEYGEN}",
            field="TUNEPLANE_SECRETS_KEY_FILE",
        )
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise InvalidInput(
            f"the secrets key file {path} is not text",
            fix=f"name the key file (one key per line); make one with {KEYGEN}",
            field="TUNEPLANE_SECRETS_KEY_FILE",
        ) from None
    return FernetSecretBox(parse_keys(text, str(path)))


def make_key_file(path: Path) -> bool:
    """Write a new key file at ``path`` (mode 0600, made atomically: never half-written, never
    over an existing one). False if one was there already (it is kept)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(f"# TunePlane secrets key, newest first (docs/notifications.md)\n{new_key()}\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # fails if another process made it first: theirs is kept
        except FileExistsError:
            return False
        return True
    finally:
        tmp.unlink(missing_ok=True)
