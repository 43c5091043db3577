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


def normalize_server(url: str) -> str:
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
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise InvalidInput(
            f"{path} is not a valid credentials file",
            fix="run `tp login --server URL --token T` again to rewrite it",
            field=str(path),
        )
    return data


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
    source = "environment" if env_server and env_token else str(credentials_path())
    return Credentials(server=normalize_server(server), token=token, source=source)


def is_logged_in() -> bool:
    try:
        load_credentials()
    except (Unauthenticated, InvalidInput):
        return False
    return True
