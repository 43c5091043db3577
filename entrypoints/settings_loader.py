"""The one loader of TunePlane's settings: environment variables, then the settings file, then
the model's defaults, converted and checked by msgspec (docs/operations.md#settings).

A settings section is a frozen dataclass whose fields carry a :class:`Var` (made with
:func:`var`): the variable's name, its section, what it does and how to fix a bad value. The
field's type (``Annotated[int, Meta(ge=1, le=65535)]`` ...) is what the value must be; a value
that is not stops the process with ``error: NAME='value' is not ... (fix: ...)``. A blank
value (empty or spaces) means "unset": the default applies.

``TUNEPLANE_SETTINGS_FILE`` names an optional TOML file of ``NAME = value`` lines (the same
names as the environment); a variable set in the environment wins over the file.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import Meta

from domain.documents import toml_loads

FILE_ENV = "TUNEPLANE_SETTINGS_FILE"
Port = Annotated[int, Meta(ge=1, le=65535)]
Seconds = Annotated[int, Meta(ge=0)]
Positive = Annotated[int, Meta(ge=1)]
StoreGroups = Annotated[int, Meta(ge=1, le=8)]
Source = Literal["default", "env", "file"]
T = TypeVar("T")


class SettingExit(SystemExit):
    """A bad setting stops the process: ``error: MESSAGE (fix: FIX)`` on stderr, exit status 1
    (SystemExit's own way); a process logging json writes it as one record instead
    (``entrypoints.logs.stop_record``). ``field`` is the variable at fault ("" unknown)."""

    def __init__(self, message: str, fix: str, field: str = "") -> None:
        super().__init__(f"error: {message} (fix: {fix})")
        self.message = message
        self.fix = fix
        self.field = field


class SettingError(Exception):
    """A bad value: ``message`` names the variable and the value, ``fix`` says what to do,
    ``field`` the variable when the raiser knows it better than its caller."""

    def __init__(self, message: str, fix: str, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.field = field

    def exit(self, field: str = "") -> SettingExit:
        return SettingExit(self.message, self.fix, self.field or field)


@dataclass(frozen=True, slots=True)
class Var:
    env: str
    section: str
    doc: str
    fix: str = ""  # how to fix a bad value; derived from the type when empty
    secret: bool = False  # masked by `tp config show`
    default_doc: str = ""  # the default as the docs say it, when the field's is computed
    exists: bool = False  # a path that must exist when set
    # a parser from the text to the value, raising SettingError (instead of msgspec's)
    parse: Callable[[str], Any] | None = None


def var(default: Any = dataclasses.MISSING, **kw: Any) -> Any:
    """A settings field: ``port: Port = var(8470, env="TUNEPLANE_HTTP_PORT", ...)``; a callable
    ``default_factory=`` computes the default instead."""
    factory = kw.pop("default_factory", dataclasses.MISSING)
    meta = {"var": Var(**kw)}
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, slots=True)
class Entry:
    """One effective setting, for `tp config show` and the docs."""

    name: str  # the field
    var: Var
    value: Any
    source: Source
    default: Any


def xdg(environ: Mapping[str, str] | None, name: str, fallback: str) -> Path:
    """``$name`` (an XDG base directory, e.g. XDG_STATE_HOME), else ``~/fallback``."""
    environ = os.environ if environ is None else environ
    return Path(environ.get(name) or Path.home() / fallback)


def variables(cls: type) -> list[tuple[dataclasses.Field[Any], Var]]:
    return [(f, f.metadata["var"]) for f in dataclasses.fields(cls) if "var" in f.metadata]


def read_file(environ: Mapping[str, str]) -> dict[str, str]:
    """The settings file's ``NAME = value`` pairs as text ({} when none is named)."""
    raw = environ.get(FILE_ENV, "").strip()
    if not raw:
        return {}
    if "\0" in raw:
        raise SettingError(f"{FILE_ENV} holds a NUL byte", "set it to the file's path", FILE_ENV)
    try:
        data = toml_loads(Path(raw).expanduser().read_text())
    except OSError as exc:
        raise SettingError(
            f"{FILE_ENV}={raw!r} cannot be read: {exc.strerror or exc}",
            f"point {FILE_ENV} at a TOML file of NAME = value lines, or unset it",
            FILE_ENV,
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingError(
            f"{FILE_ENV}={raw!r} is not TOML: {exc}",
            "write one NAME = value line per setting, e.g. TUNEPLANE_HTTP_PORT = 8470",
            FILE_ENV,
        ) from None
    out: dict[str, str] = {}
    for name, value in data.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise SettingError(
                f"{FILE_ENV}: {name} is a {type(value).__name__}, not a text or a number",
                f'write it as in the environment, e.g. {name} = "value"',
                FILE_ENV,
            )
        out[name] = str(value)
    known = {v.env for cls in ALL_SECTIONS for _, v in variables(cls)}
    unknown = sorted(set(out) - known)
    if unknown:
        raise SettingError(
            f"{FILE_ENV} names unknown settings: {', '.join(unknown)}",
            "use the names of docs/operations.md#settings (as in the environment)",
            FILE_ENV,
        )
    return out


# every settings section class, registered by `section` (for the file's unknown-name check)
ALL_SECTIONS: list[type] = []


def section(cls: type[T]) -> type[T]:
    ALL_SECTIONS.append(cls)
    return cls


def load(
    cls: type[T], environ: Mapping[str, str] | None = None, file: Mapping[str, str] | None = None
) -> T:
    """``cls`` from the environment (``os.environ`` by default) and the settings file; a bad
    value raises SystemExit naming the variable, the value and the fix."""
    return load_entries(cls, environ, file)[0]


def load_entries(
    cls: type[T], environ: Mapping[str, str] | None = None, file: Mapping[str, str] | None = None
) -> tuple[T, list[Entry]]:
    """``cls`` and its effective settings; a field whose type is another section is loaded
    too (its entries named ``field.name``)."""
    environ = os.environ if environ is None else environ
    try:
        file = read_file(environ) if file is None else file
    except SettingError as exc:
        raise exc.exit(FILE_ENV) from None
    hints = typing.get_type_hints(cls, include_extras=True)
    values: dict[str, Any] = {}
    entries: list[Entry] = []
    defaults = cls()
    for f in dataclasses.fields(typing.cast(Any, cls)):
        if hints[f.name] in ALL_SECTIONS:
            values[f.name], inner = load_entries(hints[f.name], environ, file)
            entries += [dataclasses.replace(e, name=f"{f.name}.{e.name}") for e in inner]
            continue
        v = f.metadata.get("var")
        if v is None:
            continue
        raw, source = _raw(v, environ, file)
        if raw is not None:
            try:
                values[f.name] = convert(v, hints[f.name], raw)
            except SettingError as exc:
                raise exc.exit(v.env) from None
        entries.append(
            Entry(f.name, v, values.get(f.name, getattr(defaults, f.name)), source,
                  getattr(defaults, f.name))
        )  # fmt: skip
    return cls(**values), entries


def load_one(
    cls: type,
    name: str,
    environ: Mapping[str, str] | None = None,
    file: Mapping[str, str] | None = None,
) -> Any:
    """One field of ``cls`` (a bad value of another does not stop the process); ``file``
    instead of the settings file's pairs ({}: the environment alone)."""
    environ = os.environ if environ is None else environ
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    try:
        raw, _ = _raw(f.metadata["var"], environ, read_file(environ) if file is None else file)
        if raw is None:
            return getattr(cls(), name)
        hint = typing.get_type_hints(cls, include_extras=True)[name]
        return convert(f.metadata["var"], hint, raw)
    except SettingError as exc:
        raise exc.exit(f.metadata["var"].env) from None


def _raw(v: Var, environ: Mapping[str, str], file: Mapping[str, str]) -> tuple[str | None, Source]:
    for source, where in (("env", environ), ("file", file)):
        raw = where.get(v.env)
        if raw is None:
            continue
        if raw.strip() == "":
            return None, "default"  # blank: unset
        return raw, source  # type: ignore[return-value]
    return None, "default"


def _base(hint: Any) -> tuple[Any, list[msgspec.Meta]]:
    """The type under ``Annotated`` and ``| None``, and its constraints."""
    metas: list[msgspec.Meta] = []
    if typing.get_origin(hint) is typing.Annotated:
        hint, *extra = typing.get_args(hint)
        metas = [m for m in extra if isinstance(m, msgspec.Meta)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return _base(args[0])[0], metas + _base(args[0])[1]
    return hint, metas


def describe(hint: Any) -> str:
    """What a value must be, in words: ``a whole number from 1 to 65535``."""
    base, metas = _base(hint)
    words = {int: "a whole number", float: "a number", bool: "true or false"}.get(base, "a text")
    if base is Path:
        words = "a path"
    if typing.get_origin(base) is Literal:
        words = "one of " + ", ".join(str(a) for a in typing.get_args(base))
    low = next((m.ge for m in metas if m.ge is not None), None)
    high = next((m.le for m in metas if m.le is not None), None)
    if low is not None and high is not None:
        return f"{words} from {low} to {high}"
    if low is not None:
        return f"{words} of at least {low}"
    return words


def convert(v: Var, hint: Any, raw: str) -> Any:
    if "\0" in raw:
        raise SettingError(f"{v.env} holds a NUL byte", v.fix or f"set {v.env} to {describe(hint)}")
    if v.parse is not None:
        return v.parse(raw)
    base, _ = _base(hint)
    if base is Path:
        path = Path(raw.strip()).expanduser()
        if v.exists and not path.exists():
            raise SettingError(
                f"{v.env}={raw!r} does not exist",
                v.fix or f"point {v.env} at an existing path, or unset it",
            )
        return path
    try:
        return msgspec.convert(raw.strip() if base is not str else raw, hint, strict=False)
    except msgspec.ValidationError:
        what = describe(hint)
        raise SettingError(
            f"{v.env}={raw!r} is not {what}", v.fix or f"set {v.env} to {what}, or unset it"
        ) from None
