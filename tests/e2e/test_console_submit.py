"""The console's submission dialog in headless Chromium against one real `tp serve` shared by
the module: the sign-in words name commands that exist; the preview's resolution in words first
(a GPU job on an h200 pool of two 8-GPU members, a CPU job that never says GPU) with the spec
behind a disclosure that Escape closes; a folder packed in the browser and uploaded as the CLI
uploads it, with env, a runtime and retries, that the job really runs (its log prints the
folder's file and the variable); an archive uploaded byte for byte; and refusals before and at
the upload (a zip, over the limit, a secret-looking file, an unsafe path, a bad variable name).
Screenshots are saved under test-artifacts/console/<test>/."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import tarfile
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from tests.fixtures.browser import accessibility_violations
from tests.fixtures.server import Servers

pytestmark = pytest.mark.e2e
EXAMPLE_PLUGIN = Path(__file__).resolve().parents[2] / "docs/examples/plugins/exact-match"
LIMIT = 200_000  # the module's server takes archives of at most this many bytes


@pytest.fixture(scope="module")
def module_api_server_env() -> dict[str, str]:
    return {"TUNEPLANE_MAX_ARCHIVE_BYTES": str(LIMIT)}


async def signed_in(page: Page, server: Servers, route: str = "#/submit") -> None:
    await page.goto(f"{server.url}/console/{route}")
    await page.get_by_label("API token").fill(server.token)
    await page.get_by_label("API token").press("Enter")


async def preview_custom(page: Page, command: str, profile: str = "cpu:1") -> None:
    await expect(page.get_by_role("heading", name="Submit a job")).to_be_visible()
    await page.get_by_label("Method").select_option("custom/custom")
    await page.get_by_label("Profile").fill(profile)
    await page.get_by_label("command (required)").fill(command)
    await page.get_by_role("button", name="Preview").click()


async def fact(page: Page, term: str) -> str:
    dd = page.locator(".preview dt", has_text=re.compile(f"^{re.escape(term)}$")).locator("+ dd")
    return (await dd.text_content()) or ""


def targz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue())


async def test_sign_in_words_and_the_preview_in_words_for_a_gpu_and_a_cpu_job(
    module_api_server: Servers, page: Page, screenshots: Path
) -> None:
    server = module_api_server
    await page.goto(server.url + "/console/#/submit")
    # True words: the commands named exist (tp admin token create, tp up).
    help_text = page.locator("#token-help")
    await expect(help_text).to_contain_text("tp admin token create USER")
    await expect(help_text).to_contain_text("tp up")
    await expect(page.locator("main")).not_to_contain_text("tp users")
    await page.get_by_label("API token").fill("not-a-token")
    await page.get_by_label("API token").press("Enter")
    await expect(page.get_by_role("alert")).to_contain_text("`tp admin token create USER`")
    await page.screenshot(path=screenshots / "01-sign-in-refused.png")
    await page.get_by_label("API token").fill(server.token)
    await page.get_by_label("API token").press("Enter")

    # An h200 pool of two 8-GPU nodes in fleet f (no daemon: nothing starts there; it stays, the
    # API removes no pool): h200:16 is 2 members of 8 GPUs each.
    pool = {"name": "gpu-a", "fleet": "f", "backend": "node", "gpu_model": "h200",
            "gpus_per_node": 8, "cpus_per_node": 64, "memory_mb_per_node": 512000}  # fmt: skip
    auth = server.headers
    made = await page.request.post(f"{server.url}/v1/pools", data=pool, headers=auth)
    assert made.status == 201, await made.text()
    for node in ("g1", "g2"):  # no daemon: disconnected until one connects, nothing runs there
        node_in = {"name": node, "pool": "gpu-a"}
        added = await page.request.post(server.url + "/v1/nodes", data=node_in, headers=auth)
        assert added.status == 201, await added.text()
    await preview_custom(page, "nvidia-smi -L", profile="h200:16")
    summary = page.locator("#preview-summary")
    await expect(summary).to_contain_text(
        "2 members × 8 H200 GPUs in pool gpu-a (fleet f), node backend; runtime busybox ("
    )
    await expect(summary).to_contain_text(  # the truth about nodes with no daemon behind them
        "; queue default; estimated wait: would wait, first in line (position 1 of 1 pending): "
        "needs 2×8 h200 GPUs in pool gpu-a; 0 of 2 nodes in pool gpu-a have room for a member"
        " now (2 disconnected); retry: no retry (1 attempt)."
    )
    assert await fact(page, "GPU request") == "2 members × 8 H200 GPUs in pool gpu-a (fleet f)"
    assert re.fullmatch(r"busybox \(.+@sha256:[0-9a-f]{12}…\)", await fact(page, "Runtime"))
    # The JSON is behind a disclosure: closed, opened with Enter, closed again with Escape.
    spec = page.get_by_label("What will run")
    await expect(spec).to_be_hidden()
    disclosure = page.get_by_text("The spec as JSON")
    await disclosure.focus()
    await page.keyboard.press("Enter")
    await expect(spec).to_contain_text('"gpu_model": "h200"')
    await page.screenshot(path=screenshots / "02-gpu-preview.png", full_page=True)
    assert not await accessibility_violations(page)
    await spec.focus()
    await page.keyboard.press("Escape")
    await expect(spec).to_be_hidden()
    await expect(disclosure).to_be_focused()

    # A CPU job says CPUs, never GPUs.
    await page.get_by_label("Profile").fill("cpu:1")
    await page.get_by_role("button", name="Preview").click()
    await expect(summary).to_contain_text("1 CPU in pool local (fleet local), local backend;")
    await expect(summary).to_contain_text("estimated wait: none: it would start at once")
    await expect(summary).not_to_contain_text("GPU")
    assert await fact(page, "CPU request") == "1 CPU in pool local (fleet local)"
    await expect(page.locator(".preview dt", has_text="GPU request")).to_have_count(0)
    await page.screenshot(path=screenshots / "03-cpu-preview.png", full_page=True)


async def test_a_folder_uploaded_from_the_browser_runs_with_env_runtime_and_retries(
    module_api_server: Servers, page: Page, screenshots: Path, tmp_path: Path
) -> None:
    server = module_api_server
    folder = tmp_path / "exp"
    (folder / "data").mkdir(parents=True)
    (folder / ".git").mkdir()
    (folder / "pkg" / "__pycache__").mkdir(parents=True)
    (folder / "hello.txt").write_text("hello from the chosen folder\n")
    (folder / "pkg" / "mod.txt").write_text("nested\n")
    (folder / ".gitignore").write_text("data/\n")
    (folder / "data" / "big.bin").write_bytes(b"x" * 1000)
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "pkg" / "__pycache__" / "m.pyc").write_bytes(b"\0")
    await signed_in(page, server)
    await expect(page.get_by_text(f"at most {LIMIT / 1024:.1f} KiB compressed")).to_be_visible()

    async with page.expect_response(lambda r: r.url.endswith("/v1/archives")) as answer:
        await page.get_by_label("Folder").set_input_files(folder)
    assert (await answer.value).status == 201
    status = page.locator(".source-status")
    await expect(status).to_contain_text("Uploaded the folder")
    await expect(page.get_by_label("Upload progress")).to_have_js_property("value", 1)
    await expect(status).to_contain_text("3 files: .gitignore, hello.txt, pkg/mod.txt")
    await expect(status).to_contain_text("Left out (3): ")
    for left in (".git/HEAD", "data/big.bin", "pkg/__pycache__/m.pyc"):
        await expect(status).to_contain_text(left)
    uploaded = await (await answer.value).json()

    await page.get_by_role("button", name="Add a variable").click()
    await expect(page.get_by_label("Name 1")).to_be_focused()
    await page.keyboard.type("GREETING")
    await page.get_by_label("Value 1").fill("hi there")
    await page.get_by_label("Runtime").select_option("busybox")
    await page.get_by_label("Attempts").fill("2")
    await preview_custom(page, 'cat hello.txt pkg/mod.txt; echo "greeting=$GREETING"')
    summary = page.locator("#preview-summary")
    digest = uploaded["digest"]
    await expect(summary).to_contain_text(f"source {digest[:19]}…")
    await expect(summary).to_contain_text("env GREETING")
    await expect(summary).to_contain_text("retry: 2 attempts")
    assert (await fact(page, "Source")).startswith(digest)
    await page.get_by_text("The spec as JSON").click()
    await expect(page.get_by_label("What will run")).to_contain_text('"GREETING": "hi there"')
    await page.screenshot(path=screenshots / "01-folder-preview.png", full_page=True)
    assert not await accessibility_violations(page)

    await page.get_by_role("button", name="Confirm and submit").click()
    await expect(page.get_by_role("heading", name=re.compile(r"^Job job-"))).to_be_visible()
    job_id = page.url.rsplit("/", 1)[-1]
    read = await page.request.get(f"{server.url}/v1/jobs/{job_id}", headers=server.headers)
    job = await read.json()
    assert job["spec"]["runtime"]["name"] == "busybox" and job["retry"]["max_attempts"] == 2
    assert job["spec"]["source"]["digest"] == digest
    log = page.get_by_label("Job log")
    await expect(log).to_contain_text("hello from the chosen folder")
    await expect(log).to_contain_text("nested")
    await expect(log).to_contain_text("greeting=hi there")
    await page.screenshot(path=screenshots / "02-job.png", full_page=True)


async def test_an_archive_is_uploaded_as_it_is_and_bad_sources_are_refused_with_the_fix(
    module_api_server: Servers,
    page: Page,
    screenshots: Path,
    tmp_path: Path,
    expected_statuses: set[int],
) -> None:
    expected_statuses.add(422)  # the unsafe archive
    server = module_api_server
    plugin = {f.name: f.read_bytes() for f in EXAMPLE_PLUGIN.iterdir()}
    published = await page.request.post(
        server.url + "/v1/plugins", data=targz(plugin), headers=server.headers
    )
    assert published.status in (200, 201), await published.text()
    await signed_in(page, server)
    archive = page.get_by_label("Archive (.tar.gz or .tar)")
    status = page.locator(".source-status")
    uploads: list[str] = []
    page.on("request", lambda r: uploads.append(r.url) if r.url.endswith("/v1/archives") else None)

    # A .tar.gz goes up byte for byte: the digest the preview names is the file's own.
    good = tmp_path / "source.tar.gz"
    good.write_bytes(targz({"note.txt": b"from the archive\n"}))
    await archive.set_input_files(good)
    await expect(status).to_contain_text("Uploaded source.tar.gz")
    # ... previewed with a plugin pinned by its digest.
    await page.get_by_label("exact-match 1.0.0").check()
    await preview_custom(page, "cat note.txt")
    sha = "sha256:" + hashlib.sha256(good.read_bytes()).hexdigest()
    assert (await fact(page, "Source")).startswith(sha)
    assert await fact(page, "Plugins") == "exact-match 1.0.0"
    await expect(page.locator("#preview-summary")).to_contain_text("plugins exact-match 1.0.0.")
    pinned = (await published.json())["digest"]
    await expect(page.get_by_label("What will run")).to_contain_text(pinned)
    assert len(uploads) == 1

    # Refused before a byte is sent: a zip, a folder over the limit, a secret-looking file.
    zipped = tmp_path / "source.zip"
    zipped.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    await archive.set_input_files(zipped)
    await expect(page.get_by_role("alert")).to_contain_text(
        "source.zip is a zip archive; the server takes a .tar.gz or .tar. Fix: unzip it"
    )
    big = tmp_path / "big"
    big.mkdir()
    (big / "weights.bin").write_bytes(os.urandom(LIMIT + 1000))  # does not compress
    await page.get_by_label("Folder").set_input_files(big)
    await expect(page.get_by_role("alert")).to_contain_text("above the server's limit of")
    await page.screenshot(path=screenshots / "01-too-large.png", full_page=True)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "train.sh").write_text("true\n")
    (secret / ".env").write_text("TOKEN=x\n")
    await page.get_by_label("Folder").set_input_files(secret)
    await expect(page.get_by_role("alert")).to_contain_text(
        "refusing to upload files that look like secrets: .env"
    )
    assert len(uploads) == 1

    # Refused by the server: an archive whose entry climbs out; its reason and fix are shown.
    unsafe = tmp_path / "unsafe.tar.gz"
    unsafe.write_bytes(targz({"../evil.sh": b"rm -rf /\n"}))
    await archive.set_input_files(unsafe)
    await expect(page.get_by_role("alert")).to_contain_text("Upload refused: the source archive")
    await expect(page.get_by_role("alert")).to_contain_text("Fix:")
    assert len(uploads) == 2
    await expect(page.get_by_role("button", name="Remove the source")).to_be_hidden()

    # A variable name the API would refuse is named at its row, before anything is sent.
    await page.get_by_role("button", name="Add a variable").click()
    await page.get_by_label("Name 1").fill("1BAD")
    await page.get_by_role("button", name="Preview").click()
    refusal = page.get_by_role("alert").filter(has_text="1BAD")
    await expect(refusal).to_contain_text('name "1BAD" is not allowed. Fix: use letters')
    await expect(page.get_by_label("Name 1")).to_be_focused()
    await expect(page.get_by_label("Name 1")).to_have_attribute("aria-invalid", "true")
    await page.screenshot(path=screenshots / "02-bad-env.png", full_page=True)
    assert not await accessibility_violations(page)
    await page.get_by_role("button", name="Remove variable 1").click()
    await expect(page.get_by_label("Name 1")).to_have_count(0)
