import { defineConfig } from "vitest/config";

// The console's JavaScript unit tests (test/*.test.ts): the pure parts (chart maths, the API
// client's answers) in Node, without a browser. `npm test`; tests/unit/test_console_js.py runs
// them in the suite.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    environment: "node",
  },
});
