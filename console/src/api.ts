// The JSON API with the token the user signed in with. The token lives in sessionStorage (this
// tab only, gone when it closes) and goes out only as an Authorization header to this origin.
const KEY = "tuneplane.token";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export const token = {
  get: (): string | null => sessionStorage.getItem(KEY),
  set: (value: string): void => sessionStorage.setItem(KEY, value),
  clear: (): void => sessionStorage.removeItem(KEY),
};

async function problem(res: Response): Promise<ApiError> {
  let text = `${res.status} ${res.statusText}`;
  try {
    const body = (await res.json()) as { detail?: string; title?: string; fix?: string };
    text = [body.detail ?? body.title ?? text, body.fix ? `Fix: ${body.fix}` : ""]
      .filter(Boolean)
      .join(" ");
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(res.status, text);
}

export async function call(
  path: string,
  init: RequestInit = {},
  secret: string | null = token.get(),
): Promise<Response> {
  const headers = new Headers(init.headers);
  if (secret) headers.set("Authorization", `Bearer ${secret}`);
  const res = await fetch(path, { ...init, headers, credentials: "omit" });
  if (res.status === 401 && secret === token.get()) {
    token.clear();
    window.dispatchEvent(new CustomEvent("tp:signed-out", { detail: "Your token was refused; sign in again." }));
  }
  if (!res.ok) throw await problem(res);
  return res;
}

export async function getJson<T>(path: string, secret?: string): Promise<T> {
  const res = await call(path, {}, secret ?? token.get());
  return (await res.json()) as T;
}

export async function postJson<T>(path: string, body?: unknown): Promise<T> {
  const res = await call(path, {
    method: "POST",
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return (await res.json()) as T;
}
