// What a chosen folder or archive becomes before upload, with the CLI's rules where a browser
// can follow them (entrypoints/cli/archive.py): caches and version-control folders left out, the
// folder's own .gitignore followed (its common patterns), files that look like secrets refused,
// unsafe paths refused, and the server's size limit checked before a byte is sent. Pure (no
// DOM): unit-tested in console/test/submit-source.test.ts.

export interface Picked {
  path: string; // relative to the chosen folder ("/"-separated)
  size: number;
}

// The same patterns as the CLI's SECRET_PATTERNS / NOT_SECRET.
const SECRET = [
  ".env", ".env.*", "*.pem", "*.key", "id_rsa*", "id_dsa*", "id_ed25519*", "id_ecdsa*", "*.p12", "*.pfx",
  ".netrc", "_netrc", "credentials.json", ".npmrc", ".pypirc", "*.kdbx", ".git-credentials", "*.jks",
  "*.keystore", ".htpasswd",
];
const NOT_SECRET = [".env.example", ".env.sample", ".env.template", "*.pub"];
// Never part of a source: what git would not see (its own folder) and caches that .gitignore
// usually names.
export const ALWAYS_LEFT_OUT = [".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", ".venv/", "node_modules/", ".mypy_cache/", ".pytest_cache/", ".ipynb_checkpoints/", ".DS_Store"];
// A ustar header holds a name of 100 bytes (the tar writer, nanotar, writes no longer-name
// extension): a longer path is refused rather than cut short.
export const MAX_PATH_BYTES = 100;

function globRegex(glob: string): RegExp {
  let re = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i];
    if (c === "*") re += glob[i + 1] === "*" ? (i++, ".*") : "[^/]*";
    else if (c === "?") re += "[^/]";
    else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${re}$`);
}

const base = (path: string): string => path.slice(path.lastIndexOf("/") + 1);

export function isSecret(path: string): boolean {
  const name = base(path);
  if (NOT_SECRET.some((p) => globRegex(p).test(name))) return false;
  return SECRET.some((p) => globRegex(p).test(name));
}

// One .gitignore line's rule: a name pattern matches any path component (a file's name, or a
// folder's when it ends in "/"); a pattern with an inner "/" is anchored at the folder's top.
// Negations ("!") are not followed: a negated file stays left out (said in the list).
interface Rule {
  re: RegExp;
  dirOnly: boolean;
  anchored: boolean;
}

export function ignoreRules(lines: string[]): Rule[] {
  const rules: Rule[] = [];
  for (const raw of lines) {
    const line = raw.trim();
    if (!line || line.startsWith("#") || line.startsWith("!")) continue;
    const dirOnly = line.endsWith("/");
    const body = line.replace(/\/+$/, "");
    const anchored = body.includes("/");
    rules.push({ re: globRegex(body.replace(/^\//, "")), dirOnly, anchored });
  }
  return rules;
}

export function ignored(path: string, rules: Rule[]): boolean {
  const parts = path.split("/");
  for (const rule of rules) {
    if (rule.anchored) {
      // the pattern against each leading run of components ("a/b" for a/b/c.txt)
      for (let i = 1; i <= parts.length; i++) {
        if ((i < parts.length || !rule.dirOnly) && rule.re.test(parts.slice(0, i).join("/"))) return true;
      }
    } else {
      for (let i = 0; i < parts.length; i++) {
        if ((i < parts.length - 1 || !rule.dirOnly) && rule.re.test(parts[i])) return true;
      }
    }
  }
  return false;
}

export class Refused extends Error {
  constructor(
    message: string,
    readonly fix: string,
  ) {
    super(message);
  }
}

// A folder's files ("top/a/b.py" as the browser names them) relative to the folder, the ones
// the source leaves out, and a refusal for a secret-looking file or an unsafe path.
export function folderSelection(files: Picked[], gitignore: string | null): { kept: Picked[]; left: string[] } {
  const rules = ignoreRules([...ALWAYS_LEFT_OUT, ...(gitignore ?? "").split(/\r?\n/)]);
  const kept: Picked[] = [];
  const left: string[] = [];
  const secrets: string[] = [];
  for (const f of files) {
    const path = f.path.includes("/") ? f.path.slice(f.path.indexOf("/") + 1) : f.path;
    if (!path || new TextEncoder().encode(path).length > MAX_PATH_BYTES || /[\u0000-\u001f\u007f]/.test(path) || path.split("/").some((p) => p === ".." || p === "")) {
      throw new Refused(
        `the folder holds a file whose path cannot be packed here: ${JSON.stringify(path)}`,
        `shorten it (at most ${MAX_PATH_BYTES} bytes, no control characters), or submit with \`tp submit\`, which packs any path`,
      );
    }
    if (ignored(path, rules)) {
      left.push(path);
      continue;
    }
    if (isSecret(path)) secrets.push(path);
    kept.push({ path, size: f.size });
  }
  if (secrets.length) {
    throw new Refused(
      `refusing to upload files that look like secrets: ${secrets.join(", ")}`,
      "remove them from the folder or add them to its .gitignore (the CLI's `tp submit --allow-secret-files` can send them when they hold no secret)",
    );
  }
  if (!kept.length) throw new Refused("the folder has no file to upload (all were left out)", "choose the experiment's folder, with its code");
  kept.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return { kept, left };
}

export type ArchiveKind = "tar.gz" | "tar";

// An archive is sent as it is when the API takes its format (a gzip-compressed tar or a plain
// tar); anything else is refused here, before upload, with what to do instead.
export function archiveKind(name: string, head: Uint8Array): ArchiveKind {
  const lower = name.toLowerCase();
  if (head[0] === 0x1f && head[1] === 0x8b) return "tar.gz";
  const ustar = String.fromCharCode(...head.slice(257, 262));
  if (ustar === "ustar") return "tar";
  if (lower.endsWith(".zip") || (head[0] === 0x50 && head[1] === 0x4b)) {
    throw new Refused(`${name} is a zip archive; the server takes a .tar.gz or .tar`, "unzip it and choose the folder instead (or pack it with `tar czf source.tar.gz -C folder .`)");
  }
  throw new Refused(`${name} is not a .tar.gz or .tar archive`, "choose a .tar.gz or .tar of the experiment folder, or the folder itself");
}

// Refused before upload when it is over the server's limit (GET /v1/archives/limits).
export function checkSize(what: string, bytes: number, limit: number, words: (n: number) => string): void {
  if (bytes > limit) {
    throw new Refused(`${what} is ${words(bytes)}, above the server's limit of ${words(limit)}`, "leave data sets and checkpoints out of the source (.gitignore them, or move them to storage)");
  }
}
