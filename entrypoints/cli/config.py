"""Where the CLI keeps its login, and how it writes private files (0600, atomically).

``$TUNEPLANE_CONFIG_DIR/credentials.json`` (default ``~/.config/tuneplane/``) holds
``{"server", "token"}``. ``TUNEPLANE_SERVER`` / ``TUNEPLANE_TOKEN`` override the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from domain.documents import NestedTooDeeply, json_loads
from domain.errors import InvalidInput, Unauthenticated
from entrypoints.settings_loader import load, load_one
from entrypoints.settings_sections import CliSettings

NOT_LOGGED_IN = "not logged in: run `tp login --server URL --token T` (tp up prints both)"


@dataclass(frozen=True, slots=True)
class Credentials:
    server: str
    token: str
    source: str  # where they came from, for messages: a path or "environment"


def config_dir() -> Path:
    return Path(load_one(CliSettings, "config_dir"))


def credentials_path() -> Path:
    return config_dir() / "credentials.json"


def refuse_user_info(url: str, where: str = "--server", fix: str = "") -> None:
    """Refuse a server URL with a user name or password in it (``http://user:pw@host``):
    TunePlane authenticates with tokens, and such a URL would be stored, then shown by
    `tp whoami` and in every connection error. The refusal never shows them."""
    parts = urlsplit(url.strip())
    if "@" not in parts.netloc:
        return
    host = parts.netloc.rsplit("@", 1)[1]
    shown = f"{parts.scheme}://{host}" if parts.scheme else host
    raise InvalidInput(
        f"the server URL ({where}) has a user name or password in it (`…@{host}`), which"
        " TunePlane does not use",
        fix=fix
        or f"give the URL without them, e.g. --server {shown}; TunePlane authenticates with"
        " the API token (--token)",
        field=where,
    )


def check_token(token: str, where: str) -> None:
    """Refuse a token with a control character or a character outside ASCII (a NUL or a line
    break pasted with it): the server would answer "Invalid HTTP request". Never shows it."""
    for i, ch in enumerate(token):
        if not " " < ch < "\x7f":
            raise InvalidInput(
                f"the token ({where}) holds {_char_name(ch)} at position {i + 1}; an API token"
                " is printable ASCII (tp_…)",
                fix="copy the token again as `tp up` or `tp admin token create` printed it"
                + ("" if where == "--token" else f" and fix {where}, or run `tp login` again"),
                field=where,
            )


def _char_name(ch: str) -> str:
    if ch == " ":
        return "a space"
    if ch.isprintable():
        return f"a character outside ASCII (U+{ord(ch):04X})"
    return f"a control character (U+{ord(ch):04X})"


def normalize_server(url: str, where: str = "--server") -> str:
    refuse_user_info(url, where)
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInput(
            f"server URL {url!r} is not an http(s) URL",
            fix="pass the URL `tp up` printed, e.g. --server http://127.0.0.1:8080",
            field="--server",
        )
    return url


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, mode 0600: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_private_json(path: Path, data: Any) -> None:
    write_private(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def save_credentials(server: str, token: str) -> Path:
    directory = config_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    path = credentials_path()
    write_private_json(path, {"server": normalize_server(server), "token": token})
    return path


def remove_credentials() -> bool:
    try:
        credentials_path().unlink()
    except FileNotFoundError:
        return False
    return True


def _read_file() -> dict[str, Any]:
    path = credentials_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    why = "it is not a JSON object"
    try:
        data = json_loads(raw)
    except ValueError as exc:
        data = None
        if isinstance(exc, NestedTooDeeply):
            why = str(exc)
    if not isinstance(data, dict):
        raise _malformed(path, why)
    for key in ("server", "token"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            what = repr(value) if isinstance(value, str) else f"a {type(value).__name__}"
            raise _malformed(path, f'its "{key}" is {what}, not a non-empty text')
    return data


def _malformed(path: Path, why: str) -> InvalidInput:
    return InvalidInput(
        f"the credentials file {path} is malformed: {why}",
        fix="run `tp login --server URL --token T` again to rewrite it",
        field=str(path),
    )


def load_credentials() -> Credentials:
    """The login to use; raises Unauthenticated with the `tp login` hint when there is none."""
    cli = load(CliSettings)
    env_server, env_token = cli.server, cli.token
    data = {} if env_server and env_token else _read_file()
    server = env_server or data.get("server")
    token = env_token or data.get("token")
    if not isinstance(server, str) or not server or not isinstance(token, str) or not token:
        raise Unauthenticated(
            NOT_LOGGED_IN, fix="or set TUNEPLANE_SERVER and TUNEPLANE_TOKEN in the environment"
        )
    path = str(credentials_path())
    check_token(token, "TUNEPLANE_TOKEN" if env_token else path)
    where = "TUNEPLANE_SERVER" if env_server else path
    refuse_user_info(
        server,
        where,
        fix="set TUNEPLANE_SERVER to the URL without them"
        if env_server
        else "run `tp login --server URL --token T` again with the URL without them",
    )
    source = "environment" if env_server and env_token else path
    return Credentials(server=normalize_server(server, where), token=token, source=source)


def is_logged_in() -> bool:
    try:
        load_credentials()
    except (Unauthenticated, InvalidInput):
        return False
    return True
