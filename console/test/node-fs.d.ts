// The one Node API the tests use (reading the theme's CSS), without @types/node.
declare module "node:fs" {
  export function readFileSync(path: URL, encoding: "utf8"): string;
}
