import { describe, expect, it } from "vitest";
import type { Schemas } from "../src/api";
import { checkEnv } from "../src/submit/env";
import { archiveKind, checkSize, folderSelection, ignored, ignoreRules, isSecret, Refused } from "../src/submit/source";
import { perMember, roleWords, sizeWords, summarySentence, waitWords } from "../src/submit/words";

type Summary = Schemas["PreviewSummaryOut"];
type Role = Schemas["RoleSummaryOut"];

const role = (over: Partial<Role> = {}): Role => ({
  name: "main", profile: "h200:8", pool: "a", members: 2, gpus: 8, gpu_model: "h200", cpus: 16, memory_mb: 65536, words: "2×8 h200 GPUs in pool a", ...over,
});
const summary = (over: Partial<Summary> = {}): Summary => ({
  backend: "node", queue: "q", roles: [role()],
  runtime: { name: "trl-0.12", image: "ghcr.io/x/trl", digest: "sha256:abcdef0123456789abcdef" },
  retry: "3 attempts, a new one after node-lost; backoff 30 s doubling to 600 s", retry_attempts: 3,
  source: null, env: [], plugins: [], command: ["bash", "train.sh"], ...over,
});
const wait = (over: Partial<Schemas["WaitOut"]> = {}): Schemas["WaitOut"] => ({
  preview_id: "p", starts_now: true, kind: "", text: "", position: 1, pending_total: 1, ahead: 0,
  placements: [{ role: "main", request: "", pool: "a", fleet: "f", backend: "node" }], ...over,
});

describe("the preview in words", () => {
  it("says members, GPUs, pool, fleet, backend, runtime, queue, wait and retry, in that order", () => {
    expect(summarySentence(summary(), wait())).toBe(
      "2 members × 8 H200 GPUs in pool a (fleet f), node backend; runtime trl-0.12 (ghcr.io/x/trl@sha256:abcdef012345…); " +
        "queue q; estimated wait: none: it would start at once; retry: 3 attempts, a new one after node-lost; backoff 30 s doubling to 600 s.",
    );
  });

  it("says CPUs, never GPUs, for a CPU job", () => {
    const cpu = role({ members: 1, gpus: 0, gpu_model: null, cpus: 1 });
    expect(perMember(cpu)).toBe("1 CPU");
    expect(perMember(role({ gpus: 0, gpu_model: null, cpus: 0.5 }))).toBe("0.5 CPUs");
    expect(roleWords(cpu, undefined)).toBe("1 CPU in pool a");
    expect(summarySentence(summary({ roles: [cpu] }), null)).not.toMatch(/GPU/);
  });

  it("names each role, the source, env and plugins when there are", () => {
    const s = summary({
      roles: [role({ name: "train" }), role({ name: "eval", members: 1, gpus: 1 })],
      source: { digest: "sha256:" + "f".repeat(64), size: 2048 },
      env: ["A", "B"],
      plugins: [{ name: "exact-match", version: "1.0.0", digest: "sha256:0", group: "evaluator", executes: "workload" }],
    });
    const words = summarySentence(s, wait({ starts_now: false, ahead: 2, position: 3, pending_total: 3, text: "quota" }));
    expect(words).toContain("train: 2 members × 8 H200 GPUs in pool a; eval: 1 H200 GPU in pool a");
    expect(words).toContain("would wait behind 2 jobs (position 3 of 3 pending): quota");
    expect(words).toContain("source sha256:ffffffffffff… (2.0 KiB)");
    expect(words).toContain("env A, B");
    expect(words).toContain("plugins exact-match 1.0.0");
  });

  it("says when the wait could not be estimated, and sizes in words", () => {
    expect(waitWords(null)).toMatch(/unknown/);
    expect(sizeWords(1)).toBe("1 byte");
    expect(sizeWords(64 * 1024 * 1024)).toBe("64.0 MiB");
  });
});

describe("a folder as a source", () => {
  const files = (...paths: string[]) => paths.map((path) => ({ path, size: 10 }));

  it("drops the folder's own name and leaves out what the CLI would", () => {
    const { kept, left } = folderSelection(
      files("exp/train.sh", "exp/.git/HEAD", "exp/pkg/__pycache__/m.pyc", "exp/data/big.bin", "exp/logs/x.log", "exp/b.pyc", "exp/a.py"),
      "# data\ndata/\n*.log\n!keep.log\n",
    );
    expect(kept.map((f) => f.path)).toEqual(["a.py", "train.sh"]);
    expect(left.sort()).toEqual([".git/HEAD", "b.pyc", "data/big.bin", "logs/x.log", "pkg/__pycache__/m.pyc"]);
  });

  it("anchors a pattern with a slash to the folder's top", () => {
    const rules = ignoreRules(["/build", "docs/*.tmp"]);
    expect(ignored("build/x", rules)).toBe(true);
    expect(ignored("src/build/x", rules)).toBe(false);
    expect(ignored("docs/a.tmp", rules)).toBe(true);
    expect(ignored("x/docs/a.tmp", rules)).toBe(false);
  });

  it("refuses secret-looking files, as tp submit does, and names them", () => {
    expect(isSecret("conf/.env")).toBe(true);
    expect(isSecret(".env.example")).toBe(false);
    expect(isSecret("id_ed25519.pub")).toBe(false);
    expect(() => folderSelection(files("exp/a.py", "exp/server.pem"), null)).toThrow(/server\.pem/);
  });

  it("refuses paths it cannot pack, and an empty folder", () => {
    expect(() => folderSelection(files("exp/" + "a".repeat(101)), null)).toThrow(Refused);
    expect(() => folderSelection(files("exp/bad\u0000name"), null)).toThrow(/cannot be packed/);
    expect(() => folderSelection(files("exp/.git/HEAD"), null)).toThrow(/no file to upload/);
  });
});

describe("an archive as a source", () => {
  const head = (bytes: number[], at = 0) => {
    const b = new Uint8Array(512);
    b.set(bytes, at);
    return b;
  };

  it("takes a gzip-compressed or plain tar, and refuses a zip with what to do", () => {
    expect(archiveKind("s.tar.gz", head([0x1f, 0x8b]))).toBe("tar.gz");
    expect(archiveKind("s.tar", head([...new TextEncoder().encode("ustar")], 257))).toBe("tar");
    expect(() => archiveKind("s.zip", head([0x50, 0x4b, 3, 4]))).toThrow(/zip archive.*\.tar\.gz/);
    expect(() => archiveKind("notes.txt", head([0x68, 0x69]))).toThrow(/not a \.tar\.gz or \.tar/);
  });

  it("is refused before upload when over the server's limit", () => {
    expect(() => checkSize("the folder", 65, 64, String)).toThrow(/65, above the server's limit of 64/);
    expect(() => checkSize("the folder", 64, 64, String)).not.toThrow();
  });
});

describe("environment rows", () => {
  it("gives the variables, ignoring empty rows", () => {
    expect(checkEnv([{ name: "A", value: "1" }, { name: "", value: "" }, { name: " B ", value: "x y" }])).toEqual({ env: { A: "1", B: "x y" }, problem: null });
  });

  it("names the row and the fix for what the API would refuse", () => {
    expect(checkEnv([{ name: "1A", value: "" }]).problem).toMatchObject({ row: 0, part: "name" });
    expect(checkEnv([{ name: "TUNEPLANE_X", value: "" }]).problem?.message).toMatch(/not allowed. Fix:/);
    expect(checkEnv([{ name: "A", value: "1" }, { name: "A", value: "2" }]).problem).toMatchObject({ row: 1, part: "name" });
    expect(checkEnv([{ name: "A", value: "a\u0000b" }]).problem).toMatchObject({ row: 0, part: "value" });
    expect(checkEnv([{ name: "A", value: "x".repeat(65537) }]).problem?.message).toMatch(/65537 characters/);
    expect(checkEnv(Array.from({ length: 65 }, (_, i) => ({ name: `V${i}`, value: "" }))).problem?.message).toMatch(/at most 64/);
  });
});

describe("the wait in words", () => {
  it("says first in line rather than behind no job", () => {
    expect(waitWords(wait({ starts_now: false, ahead: 0, text: "no node has room" }))).toBe("would wait, first in line (position 1 of 1 pending): no node has room");
  });
});
