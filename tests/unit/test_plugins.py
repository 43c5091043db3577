"""Plugin packages as data: plugin.toml's checks (each bad key named, with its fix), the digest
(the same for the same files however packed, different after any byte or path changes), the
tar unpacking's refusals, version precedence, and pins in experiment.toml."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from domain import tarball
from domain.errors import Conflict, InvalidInput, TooLarge
from domain.plugins import (
    Disabled,
    PluginPin,
    PluginRecord,
    check_loaded,
    check_usable,
    open_package,
    parse_declaration,
    parse_ref,
    version_key,
)
from entrypoints.cli.plugin_pins import with_pin, write_pin
from entrypoints.cli.workspace import load_experiment
from tests.unit.builders import T0

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs/examples/plugins/exact-match"
GOOD = {
    "name": '"exact-match"',
    "version": '"1.0.0"',
    "group": '"evaluation"',
    "description": '"scores predictions"',
    "capabilities": '["write-outputs", "read-outputs"]',
    "executes": '"workload"',
    "entry": '["sh", "score.sh"]',
}


def toml(**changes: str | None) -> bytes:
    keys = {**GOOD, **changes}
    return "".join(f"{k} = {v}\n" for k, v in keys.items() if v is not None).encode()


def example_files() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in EXAMPLE.iterdir()}


def test_a_good_declaration_and_the_example() -> None:
    d = parse_declaration(toml())
    assert (d.ref, d.group, d.executes, d.entry) == (
        "exact-match@1.0.0", "evaluation", "workload", ("sh", "score.sh"),
    )  # fmt: skip
    assert d.capabilities == ("read-outputs", "write-outputs")  # sorted
    package = open_package(example_files())
    assert package.declaration.name == "exact-match" and package.digest.startswith("sha256:")
    assert parse_declaration(toml(executes='"node"', entry=None)).entry == ()
    assert parse_declaration(toml(name='"acme.rouge-eval"', version='"0.3.1-rc.1"')).version
    script = parse_declaration(toml(entry='["sh", "-c", "set -e\\n\\tsh score.sh"]')).entry
    assert script[2] == "set -e\n\tsh score.sh"  # a script's line breaks and tabs are kept


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"name": None}, "plugin.toml:name", "missing required key 'name'"),
        ({"name": '"Exact_Match"'}, "plugin.toml:name", "plugin name 'Exact_Match' is not valid"),
        ({"name": '"a.b.c"'}, "plugin.toml:name", "is not valid"),
        ({"name": "3"}, "plugin.toml:name", "'name' must be a string, got int"),
        ({"version": '"1.0"'}, "plugin.toml:version", "'1.0' is not a semantic version"),
        ({"version": '"01.0.0"'}, "plugin.toml:version", "is not a semantic version"),
        ({"version": '"1.0.0+build.5"'}, "plugin.toml:version", "is not a semantic version"),
        ({"group": '"training"'}, "plugin.toml:group", "group 'training' is not one of:"),
        ({"executes": '"cluster"'}, "plugin.toml:executes", "executes 'cluster' is not one of"),
        ({"capabilities": None}, "plugin.toml:capabilities", "missing required key"),
        ({"capabilities": '"gpu"'}, "plugin.toml:capabilities", "must be a list"),
        ({"capabilities": '["fly"]'}, "plugin.toml:capabilities", "capabilities 'fly' is not"),
        ({"capabilities": '["gpu", "gpu"]'}, "plugin.toml:capabilities", "declared twice"),
        ({"entry": None}, "plugin.toml:entry", "a workload plugin needs an 'entry'"),
        ({"entry": "[]"}, "plugin.toml:entry", "'entry' must have 1-64 arguments"),
        ({"entry": '["sh", ""]'}, "plugin.toml:entry", "list of non-empty strings"),
        ({"description": '" "'}, "plugin.toml:description", "1-500 characters"),
        ({"homepage": '"x"'}, "plugin.toml:homepage", "unknown key 'homepage'"),
        # text PostgreSQL cannot store, or a terminal would act on (these were 500 or accepted)
        ({"description": '"a\\u0000b"'}, "plugin.toml:description", "control character (\\x00)"),
        ({"description": '"\\u001b[31mred"'}, "plugin.toml:description", "(\\x1b)"),
        ({"description": '"two\\nlines"'}, "plugin.toml:description", "(\\x0a)"),
        ({"description": '"a\\u009bb"'}, "plugin.toml:description", "(\\x9b)"),
        ({"entry": '["sh", "a\\u0000"]'}, "plugin.toml:entry", "entry[1] holds a control"),
        ({"entry": '["sh", "\\u001b]0;x"]'}, "plugin.toml:entry", "(\\x1b)"),
        ({"entry": "[" * 5000 + "]" * 5000}, "plugin.toml", "nested too deep"),
        ({"homepage": "{a = " * 3000 + "1" + "}" * 3000}, "plugin.toml", "nested too deep"),
    ],
)
def test_every_bad_key_is_named_with_a_fix(
    changes: dict[str, str | None], field: str, says: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_declaration(toml(**changes))
    assert err.value.field == field and says in err.value.message, err.value.message
    assert err.value.fix


def test_not_toml_and_no_plugin_toml() -> None:
    with pytest.raises(InvalidInput, match="not valid TOML"):
        parse_declaration(b"name = ")
    with pytest.raises(InvalidInput, match=r"no plugin\.toml at its top"):
        open_package({"sub/plugin.toml": toml()})


def test_the_digest_is_of_the_files_only_and_changes_with_any_byte_or_path() -> None:
    files = example_files()
    digest = open_package(files).digest
    assert open_package(dict(reversed(list(files.items())))).digest == digest
    unpacked = tarball.unpack(tarball.pack(files, mode=lambda _: 0o600), max_files=9,
                              max_bytes=1 << 20, what="package")  # fmt: skip
    assert open_package(unpacked).digest == digest  # packing does not matter
    flipped = bytearray(files["score.sh"])
    flipped[10] ^= 1
    assert open_package({**files, "score.sh": bytes(flipped)}).digest != digest
    moved = {**files, "bin/score.sh": files["score.sh"]}
    del moved["score.sh"]
    assert open_package(moved).digest != digest
    assert open_package({**files, "empty": b""}).digest != digest
    assert tarball.pack(files) == tarball.pack(dict(sorted(files.items())))  # deterministic


def _tar(*entries: tarfile.TarInfo, data: bytes = b"x") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for e in entries:
            tar.addfile(e, io.BytesIO(data) if e.isreg() else None)
    return out.getvalue()


def _entry(name: str, kind: bytes = tarfile.REGTYPE, size: int = 1) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size if kind == tarfile.REGTYPE else 0
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    return info


@pytest.mark.parametrize(
    ("entries", "error", "says"),
    [
        ([_entry("../evil")], InvalidInput, "'../evil' is not an allowed file path"),
        ([_entry("/etc/evil")], InvalidInput, "is not an allowed file path"),
        ([_entry("a/./b")], InvalidInput, "is not an allowed file path"),
        ([_entry("link", tarfile.SYMTYPE)], InvalidInput, "'link', which is not a regular file"),
        ([_entry("a"), _entry("./a")], InvalidInput, "holds 'a' twice"),
        ([_entry(f"f{i}") for i in range(4)], TooLarge, "more than 3 files"),
    ],
)
def test_unpacking_refuses_what_is_not_a_plain_package(
    entries: list[tarfile.TarInfo], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        tarball.unpack(_tar(*entries), max_files=3, max_bytes=100, what="package")


def test_unpacking_refuses_garbage_and_reads_gzip() -> None:
    with pytest.raises(InvalidInput, match="not a readable tar archive"):
        tarball.unpack(b"not a tar at all" * 40, max_files=3, max_bytes=100, what="package")
    packed = gzip.compress(tarball.pack({"a/b.txt": b"hi"}), mtime=0)
    assert tarball.unpack(packed, max_files=3, max_bytes=100, what="p") == {"a/b.txt": b"hi"}


def test_versions_sort_by_semantic_precedence() -> None:
    given = ["1.0.0", "1.0.0-rc.1", "1.0.0-alpha", "0.9.10", "0.9.9", "1.0.0-rc.10", "2.0.0"]
    assert sorted(given, key=version_key) == [
        "0.9.9", "0.9.10", "1.0.0-alpha", "1.0.0-rc.1", "1.0.0-rc.10", "1.0.0", "2.0.0",
    ]  # fmt: skip
    assert parse_ref("exact-match@1.0.0", "NAME") == ("exact-match", "1.0.0")
    assert parse_ref("exact-match", "NAME", version_required=False) == ("exact-match", None)
    with pytest.raises(InvalidInput, match="names no version"):
        parse_ref("exact-match", "NAME")


def _record(**kw: object) -> PluginRecord:
    package = open_package(example_files())
    values: dict[str, object] = dict(declaration=package.declaration, manifest=package.manifest,
                                     blob="sha256:" + "b" * 64, size=1, published_by="alice",
                                     published_at=T0)  # fmt: skip
    return PluginRecord(**(values | kw))  # type: ignore[arg-type]


def test_usable_checks_the_pin_and_loading_checks_the_files() -> None:
    record = _record()
    check_usable(record, PluginPin("exact-match", "1.0.0", record.digest), "f")
    with pytest.raises(Conflict, match="not the pinned sha256:0000"):
        check_usable(record, PluginPin("exact-match", "1.0.0", "sha256:" + "0" * 64), "f")
    off = _record(disabled=Disabled(T0, "admin", "scores are wrong"))
    with pytest.raises(Conflict, match=r"disabled for new submissions by admin on .*: scores"):
        check_usable(off, PluginPin("exact-match", "1.0.0"), "f")
    check_loaded(record, example_files())
    with pytest.raises(Conflict, match="failed its integrity check"):
        check_loaded(record, {**example_files(), "README.md": b"changed"})


def test_install_pins_into_experiment_toml_keeping_the_rest(tmp_path: Path) -> None:
    (tmp_path / "tuneplane.toml").write_text("[workspace]\nversion = 1\n")
    exp = tmp_path / "e"
    exp.mkdir()
    (exp / "experiment.toml").write_text(
        '# mine\nname = "e"\nmethod = "custom/custom"\n\n[params]\ncommand = "sh x"\n'
    )
    one = PluginPin("exact-match", "1.0.0", "sha256:" + "1" * 64)
    assert write_pin(exp, one) is None
    two = PluginPin("acme.rouge", "0.1.0", "sha256:" + "2" * 64)
    write_pin(exp, two)
    newer = PluginPin("exact-match", "1.1.0", "sha256:" + "3" * 64)
    assert write_pin(exp, newer) == one
    text = (exp / "experiment.toml").read_text()
    assert text.startswith("# mine\n") and 'command = "sh x"' in text
    assert load_experiment(str(exp)).plugins == (newer, two)
    with_section = with_pin('name = "e"\n[plugins]\n"x" = "1.0.0"\n\n[env]\nA = "b"\n', one)
    assert with_section.index("exact-match") < with_section.index("[env]")


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('acme.rouge = "1.0.0"', "plugin 'acme' is not NAME = VERSION"),
        ('"x" = "1.0"', "'1.0' is not a semantic version"),
        ('"X" = "1.0.0"', "plugin name 'X' is not valid"),
        ('"x" = { version = "1.0.0", digest = "md5:1" }', "not a sha256 digest"),
        ('"x" = { digest = "sha256:1" }', "is not NAME = VERSION"),
    ],
)
def test_bad_plugin_pins_in_experiment_toml(tmp_path: Path, table: str, says: str) -> None:
    (tmp_path / "experiment.toml").write_text(
        f'name = "e"\nmethod = "custom/custom"\n[plugins]\n{table}\n'
    )
    with pytest.raises(InvalidInput) as err:
        load_experiment(str(tmp_path))
    assert says in err.value.message and err.value.field.startswith("plugins.")  # type: ignore[union-attr]
