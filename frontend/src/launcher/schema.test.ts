import { describe, expect, it } from "vitest";
import { checkField, defaultsOf, fieldOf, getPath, groupOf, sectionFields, setPath, type JsonSchema } from "./schema";

const schema: JsonSchema = {
  type: "object",
  properties: {
    lora: { $ref: "#/$defs/Lora" },
    rollout: {
      oneOf: [{ $ref: "#/$defs/Torch" }, { $ref: "#/$defs/Vllm" }],
      discriminator: { propertyName: "backend", mapping: { torch: "#/$defs/Torch", vllm: "#/$defs/Vllm" } },
    },
    seed: { type: "integer", default: 0 },
  },
  $defs: {
    Lora: { type: "object", properties: {
      r: { type: "integer", default: 8, exclusiveMinimum: 0 },
      target_modules: { type: "array", items: { type: "string" }, minItems: 1 },
      dropout: { type: "number", default: 0, minimum: 0, exclusiveMaximum: 1 },
      keep_last: { anyOf: [{ type: "integer", exclusiveMinimum: 0 }, { type: "null" }], default: null },
    } },
    Torch: { type: "object", properties: { backend: { const: "torch", default: "torch", type: "string" }, top_k: { type: "integer", default: 0 } } },
    Vllm: { type: "object", properties: { backend: { const: "vllm", type: "string" }, gpu_memory_utilization: { type: "number", default: 0.5 } } },
  },
};

describe("defaultsOf", () => {
  it("fills stated defaults, picks the first union member, leaves computed defaults out", () => {
    expect(defaultsOf(schema)).toEqual({
      lora: { r: 8, dropout: 0, keep_last: null },
      rollout: { backend: "torch", top_k: 0 },
      seed: 0,
    });
  });
  it("takes the union member asked for", () => {
    expect(defaultsOf(schema, schema, "vllm").rollout).toEqual({ backend: "vllm", gpu_memory_utilization: 0.5 });
  });
});

describe("fields", () => {
  it("reads kinds, nullability and titles", () => {
    const fields = sectionFields(schema, schema.properties!.lora, "lora");
    expect(fields.map((f) => [f.path, f.kind, f.nullable])).toEqual([
      ["lora.r", "integer", false],
      ["lora.target_modules", "json", false],
      ["lora.dropout", "number", false],
      ["lora.keep_last", "integer", true],
    ]);
    expect(fields[0].title).toBe("R");
  });
  it("checks the bounds the schema states", () => {
    const dropout = fieldOf(schema, "lora.dropout", "dropout", schema.$defs!.Lora.properties!.dropout);
    expect(checkField(dropout, 1)).toBe("must be < 1");
    expect(checkField(dropout, -0.1)).toBe("must be ≥ 0");
    expect(checkField(dropout, 0.1)).toBeNull();
    const r = fieldOf(schema, "lora.r", "r", schema.$defs!.Lora.properties!.r);
    expect(checkField(r, 1.5)).toBe("must be a whole number");
    expect(checkField(r, null)).toBe("required");
    const tm = fieldOf(schema, "lora.target_modules", "target_modules", schema.$defs!.Lora.properties!.target_modules);
    expect(checkField(tm, [])).toBe("needs at least 1 item(s)");
  });
});

describe("paths", () => {
  it("gets and sets nested values without mutating", () => {
    const a = { lora: { r: 8 } };
    const b = setPath(a, "lora.r", 16);
    expect(getPath(b, "lora.r")).toBe(16);
    expect(a.lora.r).toBe(8);
    expect(setPath(b, "lora.r", undefined)).toEqual({ lora: {} });
    expect(getPath(b, "missing.x")).toBeUndefined();
  });
  it("groups sections", () => {
    expect(groupOf("lora.r")).toBe("model");
    expect(groupOf("seed")).toBe("train");
    expect(groupOf("new_section.x")).toBe("other");
  });
});
