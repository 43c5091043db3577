import { defineConfig } from "vite";

// The control plane serves the built files at /console/ from entrypoints/api/console_dist
// (git-ignored; deploy/dev/setup.sh builds it when missing or older than these sources).
// outDir is relative to this directory.
export default defineConfig({
  base: "/console/",
  build: {
    outDir: "../entrypoints/api/console_dist",
    emptyOutDir: true,
    sourcemap: false,
  },
});
