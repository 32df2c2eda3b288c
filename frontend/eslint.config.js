// ESLint for the browser app (`npm run lint`, part of `make test`): the recommended
// JavaScript and TypeScript rules, and React's hook rules.
import js from "@eslint/js";
import reactHooks from "eslint-plugin-react-hooks";
import globals from "globals";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "node_modules/", "src/api/schema.gen.ts", "src/api/live.gen.ts"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ["src/**/*.{ts,tsx}"],
    languageOptions: { globals: globals.browser },
    plugins: { "react-hooks": reactHooks },
    rules: {
      ...reactHooks.configs.recommended.rules,
      // a missed dependency is a stale-closure bug: an error, not a warning
      "react-hooks/exhaustive-deps": "error",
      // Rules written for the React Compiler, which this app does not use. Off: they forbid
      // two patterns the code uses on purpose: the "latest value" ref written during render
      // (uPlot and fetch callbacks read props through it without rebuilding), and an effect
      // that resets state when its key (a run id, a URL) changes.
      "react-hooks/refs": "off",
      "react-hooks/set-state-in-effect": "off",
      "react-hooks/preserve-manual-memoization": "off",
      // unused arguments spelled _x are intentional (uPlot callbacks take fixed positions)
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
  {
    files: ["*.{js,ts}", "scripts/**/*.{js,mjs}"],
    languageOptions: { globals: globals.node },
  },
);
