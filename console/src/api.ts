// The JSON API with the token the user signed in with. The token lives in sessionStorage (this
// tab only, gone when it closes) and goes out only as an Authorization header to this origin.
//
// Every route's parameters and answers are typed from the server's own OpenAPI document
// (api-schema.d.ts, generated: `.venv/bin/python -m tests.support.api_types --write`), through
// openapi-fetch: `await must(api.GET("/v1/jobs/{job_id}", { params: { path: { job_id } } }))`.
// A page never declares an answer's shape by hand.
import createClient, { type Middleware } from "openapi-fetch";
import type { components, paths } from "./api-schema";

export type Schemas = components["schemas"];

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

interface Problem {
  detail?: string;
  title?: string;
  fix?: string;
}

function problemText(status: string, body: unknown): string {
  const p = (typeof body === "object" && body !== null ? body : {}) as Problem;
  return [p.detail ?? p.title ?? status, p.fix ? `Fix: ${p.fix}` : ""].filter(Boolean).join(" ");
}

async function problem(res: Response): Promise<ApiError> {
  let body: unknown = null;
  try {
    body = await res.json();
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(res.status, problemText(`${res.status} ${res.statusText}`, body));
}

// A refused token is forgotten, and the app shows the sign-in form with a notice. Only for the
// token in use: a sign-in attempt's own refusal is the form's to show.
function refused(res: Response, secret: string | null): void {
  if (res.status === 401 && secret !== null && secret === token.get()) {
    token.clear();
    window.dispatchEvent(new CustomEvent("tp:signed-out", { detail: "Your token was refused; sign in again." }));
  }
}

// A request's own token (a sign-in attempt checks the token typed) is an X-TunePlane-Token
// header, moved to Authorization here and never sent to the server as itself.
const OWN = "X-TunePlane-Token";

const auth: Middleware = {
  onRequest({ request }) {
    const secret = request.headers.get(OWN) ?? token.get();
    request.headers.delete(OWN);
    if (secret) request.headers.set("Authorization", `Bearer ${secret}`);
    return request;
  },
  onResponse({ request, response }) {
    refused(response, request.headers.get("Authorization")?.replace(/^Bearer /, "") ?? null);
    return response;
  },
};

export const api = createClient<paths>({ baseUrl: "", credentials: "omit" });
api.use(auth);

// Headers that send `secret` instead of the signed-in token (the sign-in form checks a token
// before keeping it).
export const withToken = (secret: string): Record<string, string> => ({ [OWN]: secret });

interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

// The answer's body, or an ApiError with the problem's text and fix.
export async function must<T>(pending: Promise<Answer<T>>): Promise<T> {
  const { data, error, response } = await pending;
  if (!response.ok) throw new ApiError(response.status, problemText(`${response.status} ${response.statusText}`, error));
  return data as T;
}

// A raw request (a streamed log, a download): the same token and the same errors, no JSON.
export async function call(path: string, init: RequestInit = {}): Promise<Response> {
  const secret = token.get();
  const headers = new Headers(init.headers);
  if (secret) headers.set("Authorization", `Bearer ${secret}`);
  const res = await fetch(path, { ...init, headers, credentials: "omit" });
  refused(res, secret);
  if (!res.ok) throw await problem(res);
  return res;
}
