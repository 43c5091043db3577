import { api, ApiError, must, type Schemas, token, withToken } from "../api";
import { alertBox, h } from "../dom";

export type Whoami = Schemas["WhoAmI"];

// Sign in with an API token (the same tokens as the CLI: `tp login --token …`). The token is
// checked against GET /v1/whoami before it is kept.
export function loginPage(main: HTMLElement, notice: string | null, onSignedIn: (who: Whoami) => void): void {
  const input = h("input", {
    id: "token",
    name: "token",
    type: "password",
    autocomplete: "off",
    required: true,
    "aria-describedby": "token-help",
  });
  const status = h("div", { "aria-live": "polite" });
  if (notice) status.append(alertBox(notice));
  const button = h("button", { type: "submit" }, "Sign in");
  const form = h(
    "form",
    { "aria-labelledby": "login-title" },
    h("label", { for: "token" }, "API token"),
    input,
    h("p", { id: "token-help", class: "help" }, "A token from `tp admin token create USER`, or the admin token `tp up` prints on its first start (`tp serve` writes it to STATE/admin-token). Kept in this tab only."),
    button,
    status,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const secret = input.value.trim();
    status.replaceChildren();
    if (!secret) {
      status.append(alertBox("Enter an API token."));
      input.focus();
      return;
    }
    button.disabled = true;
    must(api.GET("/v1/whoami", { headers: withToken(secret) }))
      .then((who) => {
        token.set(secret);
        input.value = "";
        onSignedIn(who);
      })
      .catch((err: unknown) => {
        const msg =
          err instanceof ApiError && err.status === 401
            ? "That token was refused. Check it, or ask an admin for a new one (`tp admin token create USER`)."
            : `Could not sign in: ${err instanceof Error ? err.message : String(err)}`;
        status.append(alertBox(msg));
        input.focus();
      })
      .finally(() => {
        button.disabled = false;
      });
  });
  main.replaceChildren(h("h1", { id: "login-title" }, "Sign in to TunePlane"), form);
  input.focus();
}
