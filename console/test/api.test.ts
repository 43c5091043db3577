import { describe, expect, it } from "vitest";
import { ApiError, must } from "../src/api";

const answer = <T>(status: number, data?: T, error?: unknown) =>
  Promise.resolve({ data, error, response: new Response(null, { status, statusText: status === 200 ? "OK" : "Not Found" }) });

describe("must", () => {
  it("gives the body of a successful answer", async () => {
    await expect(must(answer(200, { id: "j-1" }))).resolves.toEqual({ id: "j-1" });
  });

  it("throws the problem's detail and fix", async () => {
    const err = await must(answer(404, undefined, { title: "Not Found", detail: "no job j-2", fix: "list jobs with tp job ls" })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(404);
    expect((err as ApiError).message).toBe("no job j-2 Fix: list jobs with tp job ls");
  });

  it("falls back to the status line when the body is not a problem", async () => {
    const err = await must(answer(404, undefined, "<html>")).catch((e: unknown) => e);
    expect((err as ApiError).message).toBe("404 Not Found");
  });
});
