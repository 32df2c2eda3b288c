import { describe, expect, it } from "vitest";
import type { Cluster } from "../api/types";
import { envSchema, offeredEnvironments, withEnvironment } from "./environments";
import { defaultsOf, getPath, optionalObject, sectionFields, type JsonSchema } from "./schema";
import { specFields } from "./SpecForm";

// the RunSpec's env section as pydantic writes it (workers/spec.py: `env: EnvSpec | None`,
// `server: EnvServerSpec | None`), beside a plain section
const schema: JsonSchema = {
  type: "object",
  properties: {
    train: { $ref: "#/$defs/Train" },
    env: { anyOf: [{ $ref: "#/$defs/EnvSpec" }, { type: "null" }], default: null },
  },
  $defs: {
    Train: { type: "object", properties: { steps: { type: "integer", default: 50 } } },
    EnvSpec: { type: "object", required: ["name"], properties: {
      name: { type: "string" },
      args: { type: "object" },
      max_turns: { type: "integer", default: 8, minimum: 1, maximum: 256 },
      max_episode_tokens: { anyOf: [{ type: "integer", exclusiveMinimum: 0 }, { type: "null" }], default: null },
      step_timeout_s: { type: "number", default: 30, exclusiveMinimum: 0 },
      tool_format: { type: "string", enum: ["auto", "hermes", "llama3"], default: "auto" },
      server: { anyOf: [{ $ref: "#/$defs/EnvServerSpec" }, { type: "null" }], default: null },
    } },
    EnvServerSpec: { type: "object", required: ["url"], properties: {
      url: { type: "string" }, timeout_s: { type: "number", default: 30 }, max_retries: { type: "integer", default: 3 },
    } },
  },
};

const cluster = (id: number, name: string, environments: string[], healthy = true) =>
  ({ id, name, environments, healthy, backends: ["torch"], capacity: {}, labels: {} }) as unknown as Cluster;

describe("offeredEnvironments", () => {
  const local = cluster(1, "local", ["calculator", "http"]);
  const games = cluster(2, "games", ["calculator", "http", "wordle"]);
  it("lists the chosen cluster's, or any healthy cluster's once each", () => {
    expect(offeredEnvironments([local, games], games)).toEqual(["calculator", "http", "wordle"]);
    expect(offeredEnvironments([local, games], local)).toEqual(["calculator", "http"]);
    expect(offeredEnvironments([local, games], null)).toEqual(["calculator", "http", "wordle"]);
  });
  it("is empty when no cluster offers any (or the server does not say)", () => {
    expect(offeredEnvironments([], null)).toEqual([]);
    expect(offeredEnvironments([cluster(3, "old", undefined as unknown as string[])], null)).toEqual([]);
  });
});

describe("withEnvironment", () => {
  const base = defaultsOf(schema);
  it("starts from no environment", () => {
    expect(base.env).toBeNull();
  });
  it("sets the name over the typed keys' defaults; none clears it", () => {
    const calc = withEnvironment(schema, base, "calculator");
    expect(calc.env).toEqual({ name: "calculator", max_turns: 8, max_episode_tokens: null, step_timeout_s: 30,
      tool_format: "auto", server: null });
    expect(withEnvironment(schema, calc, null).env).toBeNull();
    expect(calc.train).toBe(base.train); // the rest of the spec as it was
  });
  it("keeps what was typed when the name changes, and gives http (only) a server", () => {
    const calc = withEnvironment(schema, base, "calculator");
    const edited = { ...calc, env: { ...(calc.env as object), max_turns: 3 } };
    const http = withEnvironment(schema, edited, "http");
    expect(http.env).toMatchObject({ name: "http", max_turns: 3, server: { timeout_s: 30, max_retries: 3 } });
    const back = withEnvironment(schema, { ...http, env: { ...(http.env as object), server: { url: "http://e", timeout_s: 5 } } }, "http");
    expect(getPath(back, "env.server.url")).toBe("http://e");
    expect(withEnvironment(schema, http, "wordle").env).toMatchObject({ name: "wordle", max_turns: 3, server: null });
  });
  it("leaves a spec without env alone under a server whose RunSpec has none", () => {
    const older: JsonSchema = { ...schema, properties: { train: schema.properties!.train } };
    expect(envSchema(older)).toBeNull();
    expect(withEnvironment(older, { train: {} }, "calculator")).toEqual({ train: {}, env: null });
  });
});

describe("an optional section's fields", () => {
  const owned = new Set(["env", "env.name", "env.server"]);
  it("is one JSON field while unset, its typed keys once set, the server's too for http", () => {
    expect(optionalObject(schema, schema.properties!.env)?.properties).toHaveProperty("max_turns");
    expect(specFields(schema, defaultsOf(schema), owned).map((f) => [f.path, f.kind])).toEqual([["train.steps", "integer"], ["env", "json"]]);
    const calc = specFields(schema, withEnvironment(schema, defaultsOf(schema), "calculator"), owned);
    expect(calc.map((f) => [f.path, f.kind, f.nullable])).toEqual([
      ["train.steps", "integer", false],
      ["env.name", "string", false],
      ["env.args", "json", false],
      ["env.max_turns", "integer", false],
      ["env.max_episode_tokens", "integer", true],
      ["env.step_timeout_s", "number", false],
      ["env.tool_format", "enum", false],
      ["env.server", "json", true],
    ]);
    const http = specFields(schema, withEnvironment(schema, defaultsOf(schema), "http"), owned);
    expect(http.map((f) => f.path).filter((p) => p.startsWith("env.server"))).toEqual(
      ["env.server.url", "env.server.timeout_s", "env.server.max_retries"]);
    expect(http.find((f) => f.path === "env.max_turns")!.node.maximum).toBe(256); // bounds checked as typed
  });
  it("stays one JSON field, which can be cleared, when no control decides its presence", () => {
    const calc = withEnvironment(schema, defaultsOf(schema), "calculator");
    expect(specFields(schema, calc).map((f) => f.path)).toEqual(["train.steps", "env"]);
  });
  it("is not an optional object when the non-null member is a scalar", () => {
    expect(optionalObject(schema, schema.$defs!.EnvSpec.properties!.max_episode_tokens)).toBeNull();
    expect(sectionFields(schema, schema.$defs!.EnvSpec, "env").map((f) => f.path)).toContain("env.server");
  });
});
