import { renameSync } from "node:fs";
import { resolve } from "node:path";
import { defineConfig, type Plugin } from "vite";

// Django serves dist/index.html at / and the files of dist/assets at /static/<name>
// (settings.STATICFILES_DIRS). So the build writes everything flat into dist/assets with
// URLs under /static/, then moves index.html one level up.
const outDir = resolve(import.meta.dirname, "dist/assets");

function indexHtmlToDistRoot(): Plugin {
  return {
    name: "paddock-index-to-dist-root",
    apply: "build",
    closeBundle() {
      renameSync(resolve(outDir, "index.html"), resolve(outDir, "../index.html"));
    },
  };
}

// `npm run dev`: this app with live reload against a running `paddock up` (PADDOCK_URL,
// default http://127.0.0.1:8000), which answers the API and the websockets.
const backend = process.env.PADDOCK_URL ?? "http://127.0.0.1:8000";

export default defineConfig(({ command }) => ({
  // the dev server serves the app at /, the build is served by Django under /static/
  base: command === "build" ? "/static/" : "/",
  server: {
    proxy: {
      "/api": { target: backend, changeOrigin: false },
      "/ws": { target: backend.replace(/^http/, "ws"), ws: true },
    },
  },
  oxc: { jsx: { runtime: "automatic" } },
  plugins: [indexHtmlToDistRoot()],
  build: {
    outDir,
    assetsDir: "",
    emptyOutDir: true,
    sourcemap: false,
    target: "es2022",
    chunkSizeWarningLimit: 600,
    rolldownOptions: {
      // react-router marks its modules "use client" (for RSC); meaningless in this SPA
      onwarn(warning, warn) {
        if (warning.code !== "MODULE_LEVEL_DIRECTIVE") warn(warning);
      },
    },
  },
  test: {
    include: ["src/**/*.test.ts", "src/**/*.test.tsx"],
    environment: "node",
  },
}));
