import { describe, expect, it } from "vitest";
import { importedSpec, launchBody, launcherReducer, startFrom, type LauncherAction, type LauncherState } from "./launcherState";
import { defaultsOf, getPath, type JsonSchema } from "./schema";

// a RunSpec schema in small: a rollout union of torch and vllm, each with an option of its own
const schema: JsonSchema = {
  type: "object",
  properties: {
    rollout: {
      oneOf: [{ $ref: "#/$defs/Torch" }, { $ref: "#/$defs/Vllm" }],
      discriminator: { propertyName: "backend", mapping: { torch: "#/$defs/Torch", vllm: "#/$defs/Vllm" } },
    },
    train: { type: "object", properties: { steps: { type: "integer", default: 40 } } },
  },
  $defs: {
    Torch: { type: "object", properties: { backend: { const: "torch", default: "torch", type: "string" },
      temperature: { type: "number", default: 1 }, top_k: { type: "integer", default: 0 } } },
    Vllm: { type: "object", properties: { backend: { const: "vllm", type: "string" },
      temperature: { type: "number", default: 1 }, gpu_memory_utilization: { type: "number", default: 0.5 } } },
  },
};

const run = (state: LauncherState, ...actions: LauncherAction[]) => actions.reduce(launcherReducer, state);
const fresh = () => startFrom(defaultsOf(schema));

describe("launcherReducer", () => {
  it("starts on the defaults' backend", () => {
    expect(fresh()).toMatchObject({ backends: ["torch"], seeds: 1, cluster: undefined, mode: "form", yamlError: null });
  });

  it("makes a newly first backend the spec's, keeping the options both members share", () => {
    const s = run(fresh(), { type: "spec", spec: { ...fresh().spec, rollout: { backend: "torch", temperature: 0.7, top_k: 5 } } },
      { type: "toggleBackend", backend: "vllm", schema }, // [torch, vllm]: torch stays first
      { type: "toggleBackend", backend: "torch", schema }); // [vllm]: vllm's member now
    expect(s.backends).toEqual(["vllm"]);
    expect(s.spec.rollout).toEqual({ backend: "vllm", temperature: 0.7, gpu_memory_utilization: 0.5 });
  });

  it("leaves a clone's rollout section alone (the server gives each run its backend)", () => {
    const start = startFrom({ rollout: { backend: "torch", top_k: 5 } });
    const s = run(start, { type: "toggleBackend", backend: "vllm", schema: null },
      { type: "toggleBackend", backend: "torch", schema: null });
    expect(s.backends).toEqual(["vllm"]);
    expect(s.spec).toBe(start.spec);
  });

  it("keeps the seeds a whole number within what the server takes", () => {
    expect(run(fresh(), { type: "seeds", value: 0 }).seeds).toBe(1);
    expect(run(fresh(), { type: "seeds", value: Number("") }).seeds).toBe(1);
    expect(run(fresh(), { type: "seeds", value: 3.7 }).seeds).toBe(3);
    expect(run(fresh(), { type: "seeds", value: 99 }).seeds).toBe(16);
  });

  it("opens the YAML on the spec as it is, and takes a parsed YAML as the spec", () => {
    const yaml = run(fresh(), { type: "mode", mode: "yaml" });
    expect(yaml.yamlText).toContain("backend: torch");
    const edited = run(yaml, { type: "yaml", text: yaml.yamlText.replace("steps: 40", "steps: 60").replace("backend: torch", "backend: vllm") });
    expect(edited.spec).toMatchObject({ train: { steps: 60 }, rollout: { backend: "vllm" } });
    expect(edited.backends).toEqual(["vllm", "torch"]); // the YAML's backend first, the others kept
    expect(edited.yamlError).toBeNull();
  });

  it("keeps the last good spec while the YAML does not parse, and says why", () => {
    const yaml = run(fresh(), { type: "mode", mode: "yaml" });
    const broken = run(yaml, { type: "yaml", text: "train: [unclosed" });
    expect(broken.spec).toBe(yaml.spec);
    expect(broken.yamlText).toBe("train: [unclosed");
    expect(broken.yamlError).toBeTruthy();
    expect(run(yaml, { type: "yaml", text: "- a list" }).yamlError).toBe("the config must be a mapping of sections");
    expect(run(broken, { type: "yaml", text: yaml.yamlText }).yamlError).toBeNull(); // fixed again
  });

  it("sets the text fields and the cluster", () => {
    const s = run(fresh(), { type: "field", field: "name", value: "arith" }, { type: "field", field: "tags", value: "a, b" },
      { type: "cluster", value: null });
    expect(s).toMatchObject({ name: "arith", tags: "a, b", cluster: null });
  });
});

describe("launchBody", () => {
  it("sends a launch of the spec to the team", () => {
    const s = run(fresh(), { type: "field", field: "tags", value: " a, ,b " }, { type: "seeds", value: 2 });
    expect(launchBody(s, 3, 9, null)).toEqual({ kind: "launch", body: {
      team: 3, spec: s.spec, name: "untitled", description: "", seeds: 2, backends: ["torch"], tags: ["a", "b"],
      cluster: 9, validate_only: false, preflight: "off" } });
    // the pre-flight box asks for the check first
    expect(launchBody(run(s, { type: "preflight", value: true }), 3, 9, null)?.body).toMatchObject({ preflight: "first" });
  });

  it("sends a clone as its source config with the edits of the server's diff, once it is in", () => {
    const source = { rollout: { backend: "torch" }, train: { steps: 40, lr: 1e-4 } };
    const s = run(startFrom(source, { name: "old (clone)" }),
      { type: "spec", spec: { rollout: { backend: "torch" }, train: { steps: 60 } } });
    const clone = { experiment: 5, config: 8, spec: source };
    expect(launchBody(s, 3, null, clone, null)).toBeNull();  // the diff is being asked
    // POST /configs/diff's answer: a key deleted in the YAML is no edit (the source's stays)
    const changes = [{ path: "train.lr", a: 1e-4, b: null, only_in: "a" as const },
      { path: "train.steps", a: 40, b: 60 }, { path: "note", a: null, b: "x", only_in: "b" as const }];
    expect(launchBody(s, 3, null, clone, changes)).toMatchObject({
      kind: "clone", experiment: 5, body: { config: 8, edits: { "train.steps": 60, note: "x" }, name: "old (clone)" } });
  });
});

describe("an import", () => {
  const result = {
    source: "nemo-rl" as const, files: ["nemo-rl: examples/configs/grpo_math_1B.yaml", "config"],
    unmapped: [{ key: "logger.log_dir", origin: "config", note: null }],
    spec: { rollout: { backend: "vllm", gpu_memory_utilization: 0.6 }, train: {} },
  };

  it("fills the defaults of its backend under the keys it set", () => {
    expect(importedSpec(schema, result.spec)).toEqual({
      rollout: { backend: "vllm", temperature: 1, gpu_memory_utilization: 0.6 }, train: { steps: 40 },
    });
  });

  it("becomes the form's spec, its backend first, and keeps its report", () => {
    const s = run(fresh(), { type: "mode", mode: "import" },
      { type: "imported", spec: importedSpec(schema, result.spec), result });
    expect(s.mode).toBe("form");
    expect(s.backends).toEqual(["vllm", "torch"]);
    expect(s.imported).toEqual({ source: "nemo-rl", files: result.files, unmapped: result.unmapped });
    expect(getPath(s.spec, "rollout.gpu_memory_utilization")).toBe(0.6);
  });
});
