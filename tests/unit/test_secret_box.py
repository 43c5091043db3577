"""The Fernet secret box and its key file (adapters/secret_box.py): keys newest first, a bad
key file refused with the line and the fix, a new file made 0600 and never over another, an
altered or foreign value refused without showing it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from adapters.secret_box import FernetSecretBox, make_key_file, new_key, read_key_file
from domain.errors import InvalidInput
from domain.secret_ports import SecretUnreadable

pytestmark = pytest.mark.unit


def test_the_newest_key_seals_and_every_key_opens() -> None:
    old, new = new_key().encode(), new_key().encode()
    sealed_old = FernetSecretBox([old]).seal("whsec_a")
    both = FernetSecretBox([new, old])
    assert both.open(sealed_old) == "whsec_a"
    assert FernetSecretBox([new]).open(both.seal("whsec_b")) == "whsec_b"
    assert FernetSecretBox([new]).open(both.reseal(sealed_old)) == "whsec_a"


@pytest.mark.parametrize(
    "sealed",
    ["", "not a token", "gAAAAA" + "A" * 80, "\0", "é" * 10],
    ids=["empty", "garbage", "fernet-shaped", "nul", "unicode"],
)
def test_what_no_key_opens_is_refused_without_showing_it(sealed: str) -> None:
    box = FernetSecretBox([new_key().encode()])
    with pytest.raises(SecretUnreadable) as caught:
        box.open(sealed)
    assert "TUNEPLANE_SECRETS_KEY_FILE" in caught.value.fix
    assert (not sealed.strip("\0")) or sealed not in str(caught.value)
    with pytest.raises(SecretUnreadable):
        box.reseal(sealed)


def test_an_altered_value_is_refused() -> None:
    box = FernetSecretBox([new_key().encode()])
    sealed = box.seal("whsec_x")
    flipped = sealed[:30] + ("A" if sealed[30] != "A" else "B") + sealed[31:]
    with pytest.raises(SecretUnreadable):
        box.open(flipped)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "holds no key"),
        (b"# only a comment\n\n", "holds no key"),
        (b"not-a-key\n", "line 1 of the secrets key file"),
        (b"# c\n" + new_key().encode() + b"\nshort\n", "line 3"),
        (b"\xff\xfe", "is not text"),
        (b"A" * 70_000, "over 65536 bytes"),
    ],
    ids=["empty", "comments", "garbage", "bad-second-key", "binary", "huge"],
)
def test_a_bad_key_file_is_refused_naming_the_problem(
    tmp_path: Path, content: bytes, says: str
) -> None:
    path = tmp_path / "secrets.key"
    path.write_bytes(content)
    with pytest.raises(InvalidInput, match=says) as caught:
        read_key_file(path)
    assert "keygen" in caught.value.fix
    shown = str(caught.value)  # never a key (nor what stands in its place) echoed
    lines = [x for x in content.decode("latin-1").splitlines() if not x.startswith("#")]
    assert not any(len(x) >= 5 and x[:40] in shown for x in lines)


def test_a_missing_key_file_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no secrets key file") as caught:
        read_key_file(tmp_path / "none")
    assert "TUNEPLANE_SECRETS_KEY_FILE" in caught.value.fix


def test_a_new_key_file_is_0600_and_never_replaces_one(tmp_path: Path) -> None:
    path = tmp_path / "state" / "secrets.key"
    assert make_key_file(path) is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_text()
    assert make_key_file(path) is False and path.read_text() == first
    assert list(path.parent.iterdir()) == [path]  # no temporary file left
    box = read_key_file(path)
    assert box.open(box.seal("whsec_y")) == "whsec_y"
