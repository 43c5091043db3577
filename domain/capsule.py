"""The Job Capsule: exactly what a member runs, content-addressed, checked inside the workload.

A capsule is a set of files delivered to ``/tuneplane/capsule`` in the member's container:

* ``spec.json``: the resolved JobSpec (canonical JSON, without the capsule reference itself);
* ``source.tar.gz``: the experiment's source archive, byte for byte as uploaded (if any);
* ``entry.sh``: the job's command, quoted for POSIX sh;
* ``runtime.contract``: what the pinned runtime promises (``python=3.11``,
  ``framework.numpy=1.24.2``, …);
* ``runtime.packages``: for a runtime with a package list, every Python distribution its image
  must hold (``NAME==VERSION`` lines), so that an image whose contents drifted is refused;
* ``runner.sh``: the runner (below);
* for a recipe with an integration artifact: ``artifact/…`` (its files) and ``config.json``
  (the parameters at their config paths);
* for each workload plugin the submission uses: ``plugins/<name>/…`` (its package's files,
  checked against its published digest when the preview loaded them: docs/plugins.md);
* ``SHA256SUMS``: the sha256 of every file above, in ``sha256sum -c`` format: the *manifest*.

(The runner is shipped in the capsule, next to what it checks, so that any image with a POSIX
shell can run it; the manifest it checks first is pinned by the digest the platform passes in
``TUNEPLANE_CAPSULE_DIGEST``, and the runner itself is one of the files that manifest lists.)

The capsule's digest is the sha256 of ``SHA256SUMS``; it is recorded in the JobSpec at preview
and so fixed by the commit. The runner, started instead of the command, checks — with nothing
but POSIX sh, ``sha256sum``, ``cut``, ``grep`` and ``tar`` (BusyBox has them) — that the
manifest is the committed one, that every file matches it, and that the runtime satisfies the
contract (the image the backend started is the pinned one; Python and each framework at the
pinned version; the image's Python distributions exactly its package list); only then does it
unpack the source into ``/workspace`` and run the command. A failed check exits with one of
``RUNNER_EXITS`` before any user code ran, and says why on stderr.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import asdict, dataclass

from domain import tarball
from domain.catalog import RuntimePin

CAPSULE_DIR = "/tuneplane/capsule"
RUNNER = f"{CAPSULE_DIR}/runner.sh"
ENTRY = f"{CAPSULE_DIR}/entry.sh"  # the job's command, as the runner starts it
MANIFEST = "SHA256SUMS"
DIGEST_ENV = "TUNEPLANE_CAPSULE_DIGEST"
IMAGE_ENV = "TUNEPLANE_RUNTIME_IMAGE"  # the image the backend started the member from

RUNNER_EXITS = {
    90: "the runtime cannot verify the Job Capsule (no sha256sum, cut, grep, tr or tar)",
    91: "the Job Capsule's manifest is not the one committed",
    92: "a file of the Job Capsule changed since the commit",
    93: "the runtime does not satisfy the Job Capsule's runtime contract",
    94: "the source archive in the Job Capsule cannot be unpacked",
    95: "the runtime does not provide the framework versions the Job Capsule's runtime"
    " contract pins",
    96: "the member runs another image than the runtime the Job Capsule pins",
    97: "the runtime image's Python packages are not the ones its contract lists (the image"
    " drifted: rebuild it)",
}
PACKAGES = "runtime.packages"  # the capsule file listing every distribution the image must hold

# The runner's one python3 call for ``runtime.packages``: every distribution importlib.metadata
# sees on python3's own path (-E: the job's PYTHON* variables do not count; not the current
# directory) against the list, by canonical name and exact version. Prints each difference,
# "; "-separated, and exits 3; exit 0 when they are the same. Arguments: the list, then
# (tests only) the directories to look in instead of sys.path. No single quote: the runner
# passes it to ``python3 -c '…'``.
PACKAGE_CHECK = """\
import importlib.metadata as md, os, re, sys
def key(name):
    return re.sub(r"[-_.]+", "-", name).lower()
want = {}
for line in open(sys.argv[1]):
    name, _, version = line.strip().partition("==")
    if name:
        want[name] = version
have, problems, seen = {}, [], set()
for dist in md.distributions(path=sys.argv[2:] or [p for p in sys.path if p]):
    where = os.path.realpath(str(getattr(dist, "_path", "?")))
    if where in seen:  # the same directory reached twice through sys.path
        continue
    seen.add(where)
    try:
        name, version = dist.metadata["Name"], dist.version
    except Exception:
        name = version = None
    if not name or not version:
        problems.append("an unreadable distribution at " + where)
    else:
        have.setdefault(key(name), []).append(version)
for name in sorted(set(want) | set(have)):
    found, pinned = have.get(name, []), want.get(name)
    if len(found) > 1:
        problems.append("%s is installed %d times (%s)" % (name, len(found), ", ".join(found)))
    elif not found:
        problems.append("%s %s is missing" % (name, pinned))
    elif pinned is None:
        problems.append("%s %s is not in the contract" % (name, found[0]))
    elif found[0] != pinned:
        problems.append("%s is %s, the contract pins %s" % (name, found[0], pinned))
if problems:
    more = len(problems) - 20
    print("; ".join(problems[:20] + (["and %d more" % more] if more > 0 else [])))
    sys.exit(3)
"""
# The runner's one python3 call for the contract's frameworks (``NAME=VERSION`` arguments):
# each must be installed at exactly that version; the first that is not is named, exit 3.
# Without importlib.metadata (python3-minimal) every framework reads as absent.
FRAMEWORK_CHECK = """\
import sys
try:
    import importlib.metadata as md
except ImportError:
    md = None
for pin in sys.argv[1:]:
    name, want = pin.split("=", 1)
    try:
        have = md.version(name) if md else ""
    except Exception:
        have = ""
    if have != want:
        print("the runtime contract pins %s %s; this runtime has %s"
              % (name, want, have or "no " + name))
        sys.exit(3)
"""
assert "'" not in PACKAGE_CHECK + FRAMEWORK_CHECK

RUNNER_SCRIPT = r"""#!/bin/sh
# TunePlane runner: verify the Job Capsule, then run the job's command (docs/capsule.md).
C=/tuneplane/capsule
fail() { code=$1; shift; echo "tuneplane-runner: $*" >&2; exit "$code"; }
for tool in sha256sum cut grep tr tar; do
    command -v "$tool" >/dev/null 2>&1 ||
        fail 90 "the runtime has no $tool: the Job Capsule cannot be verified"
done
cd "$C" 2>/dev/null || fail 91 "no Job Capsule in $C"
got="sha256:$(sha256sum SHA256SUMS 2>/dev/null | cut -d' ' -f1)"
want=${TUNEPLANE_CAPSULE_DIGEST:-(none given)}
[ "$got" = "$want" ] || fail 91 "the capsule manifest is $got, not the committed $want"
bad=$(sha256sum -c SHA256SUMS 2>/dev/null | grep -v ': OK$' | cut -d: -f1 | tr '\n' ' ')
[ -z "$bad" ] || fail 92 "changed since the commit: $bad"
want=$(grep '^image=' runtime.contract | cut -d= -f2-)
[ "${TUNEPLANE_RUNTIME_IMAGE:-}" = "$want" ] ||
    fail 96 "the member runs image ${TUNEPLANE_RUNTIME_IMAGE:-(none given)}; the capsule pins $want"
want=$(grep '^python=' runtime.contract | cut -d= -f2)
if [ -n "$want" ]; then
    have=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
    [ "$have" = "$want" ] ||
        fail 93 "the runtime contract asks for Python $want; this runtime has ${have:-no python3}"
fi
pins=$(grep '^framework\.' runtime.contract | cut -d. -f2-)  # NAME=VERSION, no spaces
if [ -n "$pins" ]; then  # one python3 for them all; the first that differs is named
    bad=$(python3 -c '@FRAMEWORK_CHECK@' $pins 2>&1) || fail 95 "$bad"
fi
if [ -f runtime.packages ]; then  # every Python distribution of the image, and nothing else
    drift=$(python3 -E -c '@PACKAGE_CHECK@' runtime.packages 2>&1) || {
        name=$(grep '^name=' runtime.contract | cut -d= -f2-)
        fail 97 "the image's Python packages are not the ones its runtime contract lists" \
            "(runtime.packages): $drift. Fix: rebuild the image from its lock, \`tp runtime" \
            "build $name --force\` (or \`bash deploy/images/build.sh $name --force\`), then" \
            "preview and submit again"
    }
fi
mkdir -p /workspace || fail 94 "cannot make /workspace"
if [ -f source.tar.gz ]; then  # gzip-compressed as uploaded, or a plain tar
    tar -xzf source.tar.gz -C /workspace 2>/dev/null || tar -xf source.tar.gz -C /workspace ||
        fail 94 "the source archive cannot be unpacked"
fi
cd /workspace || fail 94 "cannot enter /workspace"
[ "$#" -eq 0 ] || exec "$@"  # a wrapped start (a Ray member): checked first, run from here
exec /bin/sh "$C/entry.sh"
""".replace("@PACKAGE_CHECK@", PACKAGE_CHECK).replace("@FRAMEWORK_CHECK@", FRAMEWORK_CHECK)


@dataclass(frozen=True, slots=True)
class CapsuleRef:
    """A built capsule: its digest (sha256 of the manifest) and the blob holding its tar."""

    digest: str
    blob: str
    size: int

    def to_dict(self) -> dict[str, object]:
        return {"digest": self.digest, "blob": self.blob, "size": self.size}


@dataclass(frozen=True, slots=True)
class StorageCapabilities:
    """What a backend offers, declared as data (docs/capsule.md): the Job Capsule delivered
    into each member (``capsule``), host directories mounted into members (``shared_mounts``),
    and output storage that other members and later attempts can read (``shared_outputs``)."""

    capsule: bool = False
    shared_mounts: bool = False
    shared_outputs: bool = False

    def offers(self, need: str) -> bool:
        """Whether it offers ``need``, named as its field is (a method's ``needs``); an unknown
        name is not offered."""
        return bool(asdict(self).get(need, False))


def runner_failure(exit_code: int | None) -> str | None:
    """Why a member failed if ``exit_code`` is the runner's, else None."""
    if exit_code is None or exit_code not in RUNNER_EXITS:
        return None
    return f"{RUNNER_EXITS[exit_code]} (runner exit {exit_code}; the member's log says which)"


def entry_script(command: tuple[str, ...]) -> bytes:
    return ("exec " + " ".join(shlex.quote(arg) for arg in command) + "\n").encode()


def contract(runtime: RuntimePin) -> bytes:
    """``key=value`` lines; one ``framework.NAME=VERSION`` per framework (names and versions
    hold no whitespace or ``=``: domain.runtimes checks them when the runtime is added)."""
    lines = [
        f"name={runtime.name}",
        f"image={runtime.digest}",
        f"python={runtime.python or ''}",
        f"process_model={runtime.process_model}",
        *(f"framework.{name}={version}" for name, version in sorted(runtime.frameworks.items())),
    ]
    return ("\n".join(lines) + "\n").encode()


def package_list(runtime: RuntimePin) -> bytes | None:
    """``runtime.packages``: one ``NAME==VERSION`` line per distribution the image must hold,
    sorted; None when the runtime lists none (then the capsule has no such file)."""
    if not runtime.packages:
        return None
    return "".join(f"{n}=={v}\n" for n, v in sorted(runtime.packages.items())).encode()


def build(
    spec_json: bytes,
    command: tuple[str, ...],
    runtime: RuntimePin,
    source: bytes | None,
    extra: dict[str, bytes] | None = None,
) -> tuple[str, bytes]:
    """The capsule of a job: ``(digest, tar)``. The tar holds ``tuneplane/capsule/<file>``
    entries (deterministic: same input, same bytes) to unpack at the container's root.
    ``extra``: more files by relative path (a recipe's ``artifact/…`` and ``config.json``,
    workload plugins' ``plugins/<name>/…``)."""
    files = dict(extra or {})
    files |= {
        "spec.json": spec_json,
        "entry.sh": entry_script(command),
        "runtime.contract": contract(runtime),
        "runner.sh": RUNNER_SCRIPT.encode(),
    }
    if (packages := package_list(runtime)) is not None:
        files[PACKAGES] = packages
    if source is not None:
        files["source.tar.gz"] = source
    manifest = "".join(
        f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in sorted(files.items())
    ).encode()
    files[MANIFEST] = manifest
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    return digest, tarball.pack(files, "tuneplane/capsule")
