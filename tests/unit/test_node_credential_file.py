"""The node daemon's credential file (adapters/grpc/node_client.py ``load_credential``): a file
it cannot use is refused at load, naming the file and the fix, never showing the secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.grpc.node_client import CREDENTIAL_FILE, load_credential
from domain.errors import InvalidInput

pytestmark = pytest.mark.unit

SECRET = "tpc_s3cr3t-value-that-must-never-be-logged"
GOOD = {"node": "n1", "pool": "p", "credential": SECRET, "credential_id": "cred-1"}


def test_a_good_file_loads(tmp_path: Path) -> None:
    (tmp_path / CREDENTIAL_FILE).write_text(json.dumps(GOOD))
    stored = load_credential(tmp_path)
    assert stored is not None and stored.credential == SECRET
    assert load_credential(tmp_path / "nowhere") is None  # not enrolled


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (json.dumps({**GOOD, "credential": SECRET + "\x00\r\nX-Evil: 1"}), "cannot hold"),
        (json.dumps({**GOOD, "credential": SECRET + " tail"}), "cannot hold"),
        (json.dumps({"node": 7, "pool": None, "credential": ["x"], "credential_id": 1}), "'node'"),
        (json.dumps({**GOOD, "credential": ""}), "'credential' is not a non-empty text"),
        ("[1, 2]", "a JSON list"),
        ("", "unreadable"),
        (json.dumps({"node": "n1"}), "no field 'pool'"),
    ],
)
def test_an_unusable_file_is_refused_naming_it_never_showing_the_secret(
    tmp_path: Path, content: str, why: str
) -> None:
    path = tmp_path / CREDENTIAL_FILE
    path.write_text(content)
    with pytest.raises(InvalidInput) as refused:
        load_credential(tmp_path)
    text = f"{refused.value.message} {refused.value.fix}"
    assert str(path) in refused.value.message and why in refused.value.message
    assert "--join-token" in refused.value.fix
    assert SECRET not in text and "s3cr3t" not in text
