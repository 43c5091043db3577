"""Every repository path the docs name exists.

Scans README.md and docs/*.md for inline code spans and Markdown links. A token of a code span
that starts with a top-level folder of the repository (`domain/`, `tests/`, ...) must name a file
or folder; a relative link must resolve (from the doc's own folder). Fenced code blocks are not
scanned (they hold commands and output, not references). Accepted forms: `path::test_name`,
`path:123` (a line), `path#anchor` (links), `dir/{a,b}.py` (expanded). Skipped: globs (`*`),
placeholders (`<name>`, `…`), URLs, build outputs (git-ignored folders). The failure lists each
missing path with its doc and line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PREFIXES = (
    "domain/",
    "application/",
    "adapters/",
    "entrypoints/",
    "tests/",
    "deploy/",
    "docs/",
    "console/",
    "proto/",
    ".ci/",
)
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
PLACEHOLDER = re.compile(r"[*<>…]|\.\.\.|\$|\[")
BRACES = re.compile(r"\{([^{}]*)\}")
MEDIA_TYPE = re.compile(r"^application/[\w.+-]*(json|octet-stream|gzip|x-tar)$")


def build_outputs() -> tuple[str, ...]:
    """Git-ignored folders rooted at the repository (`/entrypoints/api/console_dist/`): docs
    may name what a build puts there, which a fresh clone does not have."""
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    return tuple(
        line.strip().lstrip("/").rstrip("/")
        for line in lines
        if line.startswith("/") and not PLACEHOLDER.search(line)
    )


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def expand(token: str) -> list[str]:
    """`a/{b,c}.py` → `a/b.py`, `a/c.py` (nested braces one level at a time)."""
    match = BRACES.search(token)
    if match is None:
        return [token]
    head, tail = token[: match.start()], token[match.end() :]
    return [p for alt in match.group(1).split(",") for p in expand(head + alt + tail)]


def clean(token: str) -> str | None:
    """The path a code-span token names, or None when it names none we can check."""
    token = token.strip().rstrip(".,;:)\"'").lstrip("(\"'")
    if not token.startswith(PREFIXES):
        return None
    token = token.split("::", 1)[0]
    token = re.sub(r":\d+(-\d+)?$", "", token)
    if PLACEHOLDER.search(token) or MEDIA_TYPE.match(token):
        return None
    return token


def referenced(doc: Path) -> list[tuple[int, str, Path]]:
    """(line number, path as written, path on disk) for each path `doc` names."""
    found: list[tuple[int, str, Path]] = []
    fenced = False
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced:
            continue
        for span in CODE_SPAN.finditer(line):
            for word in span.group(2).split():
                path = clean(word)
                if path is not None:
                    found.extend((number, p, ROOT / p) for p in expand(path))
        for link in LINK.finditer(line):
            target = link.group(1).split("#", 1)[0]
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target) or PLACEHOLDER.search(target):
                continue
            found.append((number, target, (doc.parent / target).resolve()))
    return found


def test_the_scanner_reads_spans_links_and_suffixes(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "see `tests/unit/a.py::test_b`, `bash deploy/dev/x.sh` and `domain/{a,b}.py:12`\n"
        "```\n`domain/in_a_fence.py`\n```\n"
        "skip `adapters/<name>/`, `tests/*.py`, `application/problem+json`; [link](other.md#anchor) [web](https://x.org)\n",
        encoding="utf-8",
    )
    assert [(n, p) for n, p, _ in referenced(doc)] == [
        (1, "tests/unit/a.py"),
        (1, "deploy/dev/x.sh"),
        (1, "domain/a.py"),
        (1, "domain/b.py"),
        (5, "other.md"),
    ]


def _built(path: Path) -> bool:
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else ""
    return any(rel == d or rel.startswith(d + "/") for d in build_outputs())


def test_build_outputs_are_not_required() -> None:
    assert "entrypoints/api/console_dist" in build_outputs()
    assert _built(ROOT / "entrypoints/api/console_dist/index.html")
    assert not _built(ROOT / "entrypoints/api/app.py")


def test_every_path_the_docs_name_exists() -> None:
    missing = [
        f"{doc.relative_to(ROOT)}:{number}: {written}"
        for doc in doc_files()
        for number, written, path in referenced(doc)
        if not path.exists() and not _built(path)
    ]
    assert not missing, "the docs name paths that do not exist:\n" + "\n".join(missing)
