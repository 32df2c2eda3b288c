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

export default defineConfig({
  base: "/static/",
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
    include: ["src/**/*.test.ts"],
    environment: "node",
  },
});
