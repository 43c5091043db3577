// Environment rows checked as the API checks them (domain/submission.py: at most 64, names of
// letters, digits and "_" not starting with a digit or TUNEPLANE_; values at most 65,536
// characters, no NUL), so a mistake is named next to its row before anything is sent. Pure.
export const MAX_ENV = 64;
export const MAX_VALUE = 65536;
const NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

export interface EnvProblem {
  row: number; // the row at fault (0-based)
  part: "name" | "value";
  message: string;
}

export function checkEnv(rows: Array<{ name: string; value: string }>): { env: Record<string, string>; problem: EnvProblem | null } {
  const env: Record<string, string> = {};
  const used = rows.filter((r) => r.name.trim() !== "" || r.value !== "");
  if (used.length > MAX_ENV) {
    return { env, problem: { row: MAX_ENV, part: "name", message: `${used.length} environment variables; at most ${MAX_ENV} are accepted. Fix: move bulk configuration into a file in the source.` } };
  }
  for (const [row, r] of rows.entries()) {
    const name = r.name.trim();
    if (name === "" && r.value === "") continue; // an empty row is ignored
    if (!NAME.test(name) || name.toUpperCase().startsWith("TUNEPLANE_")) {
      return { env, problem: { row, part: "name", message: `Environment variable name ${JSON.stringify(name)} is not allowed. Fix: use letters, digits and _, not starting with a digit or TUNEPLANE_ (at most 128).` } };
    }
    if (name in env) return { env, problem: { row, part: "name", message: `Environment variable ${name} is given twice. Fix: keep one row for it.` } };
    if (r.value.includes("\u0000")) return { env, problem: { row, part: "value", message: `The value of ${name} holds a NUL character. Fix: remove it.` } };
    if (r.value.length > MAX_VALUE) {
      return { env, problem: { row, part: "value", message: `The value of ${name} is ${r.value.length} characters; at most ${MAX_VALUE} are accepted. Fix: put it in a file in the source.` } };
    }
    env[name] = r.value;
  }
  return { env, problem: null };
}
