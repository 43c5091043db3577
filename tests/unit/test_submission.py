"""Resolution of an intent into a JobSpec and an immutable, digested Preview."""

import math
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from adapters.catalog import default_catalog
from domain.catalog import RuntimeSpec
from domain.errors import Conflict, Expired, InvalidInput
from domain.fleet import Pool
from domain.requests import resolve_roles
from domain.submission import JobSpec, Preview, SourceRef, SubmissionIntent, make_preview, resolve
from tests.unit.builders import PIN, T0, an_intent

pytestmark = pytest.mark.unit
CATALOG = default_catalog([RuntimeSpec("busybox", PIN.image, None, "single-process")])
LOCAL = Pool("local", "local", "local", 0, 4.0, 8192)


def _resolve(intent: SubmissionIntent) -> JobSpec:
    roles = resolve_roles(intent.profiles, [LOCAL], [])
    return resolve(intent, CATALOG, PIN, roles, "local", "default")


def _preview(
    intent: SubmissionIntent | None = None, preview_id: str = "pv-1", now: datetime = T0
) -> Preview:
    intent = intent or an_intent()
    spec = _resolve(intent)
    return make_preview(
        preview_id=preview_id,
        owner="alice",
        intent=intent,
        spec=spec,
        now=now,
        ttl=timedelta(hours=1),
    )


def test_resolves_custom_command_and_profile() -> None:
    spec = _resolve(an_intent(params={"command": "sh train.sh"}, profiles=("cpu:2",)))
    assert spec.command == ("/bin/sh", "-c", "sh train.sh")
    assert (spec.backend, spec.resources.cpus, spec.resources.memory_mb) == ("local", 2.0, 4096)
    assert (spec.queue, spec.members, spec.profile) == ("default", 1, "cpu:2")
    assert spec.runtime.digest == PIN.digest


def test_digest_depends_on_content_not_on_id_or_time() -> None:
    a = _preview(preview_id="pv-a", now=T0)
    b = _preview(preview_id="pv-b", now=T0 + timedelta(minutes=5))
    c = _preview(an_intent(params={"command": "echo other"}))
    assert a.digest == b.digest != c.digest
    assert a.expires_at == T0 + timedelta(hours=1)


@pytest.mark.parametrize(
    ("intent", "field", "words"),
    [
        (an_intent(method="trl/nope"), "intent.method", "custom/custom"),
        (an_intent(profiles=("h900:8",)), "intent.profiles[0]", "cpu:N"),
        (an_intent(params={}), "intent.params.command", "--set command="),
        (an_intent(params={"command": "x", "lr": "0.1"}), "intent.params.lr", "command"),
        (an_intent(experiment="Bad Name"), "intent.experiment", "lower-case"),
        (an_intent(env={"TUNEPLANE_TOKEN": "x"}), "intent.env.TUNEPLANE_TOKEN", "TUNEPLANE_"),
        (an_intent(env={"1BAD": "x"}), "intent.env.1BAD", "letters"),
        (an_intent(source=SourceRef("md5:abc", 3)), "intent.source.digest", "POST /v1/archives"),
    ],
)
def test_bad_intents_name_the_field_and_the_fix(
    intent: SubmissionIntent, field: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        _resolve(intent)
    assert err.value.field == field
    assert words in err.value.fix or words in err.value.message


def test_commit_checks_digest_then_expiry() -> None:
    p = _preview()
    p.check_commit(p.digest, T0 + timedelta(minutes=59))
    with pytest.raises(Conflict) as err:
        p.check_commit("sha256:" + "0" * 64, T0)
    assert "preview" in err.value.fix
    with pytest.raises(Expired):
        p.check_commit(p.digest, T0 + timedelta(hours=1))


def test_params_are_coerced_and_checked() -> None:
    from domain.catalog import Method, ParamSpec, ParamValue, resolve_params

    m = Method(
        "x/y",
        "",
        (
            ParamSpec("lr", "float", "", minimum=0.0, maximum=1.0, default=0.1),
            ParamSpec("epochs", "int", "", default=1),
            ParamSpec("fast", "bool", ""),
            ParamSpec("opt", "str", "", choices=("adam", "sgd")),
        ),
        "busybox",
    )
    assert resolve_params(m, {"lr": "0.5", "epochs": "3", "fast": "yes"}) == {
        "lr": 0.5,
        "epochs": 3,
        "fast": True,
    }
    assert resolve_params(m, {}) == {"lr": 0.1, "epochs": 1}
    bads: tuple[dict[str, ParamValue], ...] = (
        {"lr": "2"},
        {"lr": "abc"},
        {"epochs": "1.5"},
        {"fast": "maybe"},
        {"opt": "rmsprop"},
        {"epochs": True},
    )
    for bad in bads:
        with pytest.raises(InvalidInput) as err:
            resolve_params(m, bad)
        assert err.value.field == f"intent.params.{next(iter(bad))}"


@pytest.mark.parametrize("raw", ["nan", "NaN", "-nan", "inf", "-inf", "1e400", math.nan, math.inf])
def test_a_float_parameter_must_be_finite_bounded_or_not(raw: str | float) -> None:
    """Issue 19, defect 1: NaN passed both range checks (every comparison with it is false);
    a parameter without a maximum took inf. Either then failed the capsule's JSON (500)."""
    from domain.catalog import ParamSpec, coerce_param

    for spec, fix in (
        (ParamSpec("t", "float", "", minimum=0.01, maximum=10.0), "from 0.01 to 10.0"),
        (ParamSpec("t", "float", ""), "finite float"),
    ):
        with pytest.raises(InvalidInput) as err:
            coerce_param(spec, raw, "intent.params.t")
        assert err.value.field == "intent.params.t" and "not a finite number" in err.value.message
        assert fix in err.value.fix
        with pytest.raises(InvalidInput):
            coerce_param(ParamSpec("n", "int", ""), raw, "intent.params.n")


def test_preview_is_immutable() -> None:
    p = _preview()
    with pytest.raises(AttributeError):
        p.digest = "x"  # type: ignore[misc]
    assert replace(p, id="other").digest == p.digest


def test_specs_and_intents_round_trip_and_old_specs_still_load() -> None:
    intent = an_intent(profiles=("cpu:2",), queue="default")
    assert SubmissionIntent.from_dict(intent.to_dict()) == intent
    spec = _resolve(intent)
    assert JobSpec.from_dict(spec.to_dict()) == spec
    old = spec.to_dict()
    del old["roles"], old["queue"]
    old |= {"profile": "cpu:2", "members": 1, "resources": spec.resources.to_dict()}
    assert JobSpec.from_dict(old) == spec
