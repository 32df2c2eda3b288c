// Reading the RunSpec JSON Schema (pydantic's output, workers/spec.py) into form fields:
// $ref resolution, nullable fields (anyOf [T, null]), the rollout union discriminated by
// `backend`, defaults, and the checks the form can make before the server does.

export interface JsonSchema {
  $ref?: string;
  $defs?: Record<string, JsonSchema>;
  type?: string;
  title?: string;
  description?: string;
  default?: unknown;
  const?: unknown;
  enum?: unknown[];
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  discriminator?: { propertyName: string; mapping: Record<string, string> };
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  prefixItems?: JsonSchema[];
  minItems?: number;
  maxItems?: number;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
}

export type FieldKind = "integer" | "number" | "boolean" | "enum" | "string" | "json";

export interface Field {
  path: string;
  key: string;
  title: string;
  description: string;
  kind: FieldKind;
  nullable: boolean;
  options: string[];
  readOnly: boolean;
  default: unknown;
  node: JsonSchema;
}

export function resolve(root: JsonSchema, node: JsonSchema): JsonSchema {
  let current = node;
  while (current.$ref) {
    const name = current.$ref.replace(/^#\/\$defs\//, "");
    const target = root.$defs?.[name];
    if (!target) throw new Error(`the schema has no definition ${current.$ref}`);
    current = { ...target, ...Object.fromEntries(Object.entries(current).filter(([k]) => k !== "$ref")) };
  }
  return current;
}

/** The member of a discriminated union (rollout) chosen by its discriminator value. */
export function unionMember(root: JsonSchema, node: JsonSchema, value: unknown): JsonSchema | null {
  const ref = node.discriminator?.mapping[String(value)];
  if (ref) return resolve(root, { $ref: ref });
  return node.oneOf ? resolve(root, node.oneOf[0]) : null;
}

export function discriminatorValues(node: JsonSchema): string[] {
  return node.discriminator ? Object.keys(node.discriminator.mapping) : [];
}

function nonNull(node: JsonSchema): { node: JsonSchema; nullable: boolean } {
  if (node.anyOf) {
    const rest = node.anyOf.filter((n) => n.type !== "null");
    if (rest.length === 1) return { node: { ...node, ...rest[0], anyOf: undefined }, nullable: rest.length < node.anyOf.length };
  }
  return { node, nullable: false };
}

function humanTitle(key: string, title?: string): string {
  const t = title ?? key.replace(/_/g, " ");
  return t.charAt(0).toUpperCase() + t.slice(1).toLowerCase()
    .replace(/\b(lr|kl|gpus?|cpus?|lora|jsonl|is|eps|rng)\b/g, (m) => m.toUpperCase());
}

export function fieldOf(root: JsonSchema, path: string, key: string, raw: JsonSchema): Field {
  const { node, nullable } = nonNull(resolve(root, raw));
  let kind: FieldKind = "json";
  let options: string[] = [];
  if (node.enum) { kind = "enum"; options = node.enum.map(String); }
  else if (node.type === "integer") kind = "integer";
  else if (node.type === "number") kind = "number";
  else if (node.type === "boolean") kind = "boolean";
  else if (node.type === "string") kind = "string";
  return {
    path, key, title: humanTitle(key, raw.title ?? node.title), description: node.description ?? "",
    kind, nullable, options, readOnly: node.const !== undefined, default: raw.default ?? node.default, node,
  };
}

/** The object an optional section holds (`anyOf [object, null]`: env, env.server,
 * logging.wandb…), or null when `raw` is something else. */
export function optionalObject(root: JsonSchema, raw: JsonSchema): JsonSchema | null {
  const options = resolve(root, raw).anyOf;
  if (!options || options.length !== 2 || !options.some((o) => o.type === "null")) return null;
  const inner = resolve(root, options.find((o) => o.type !== "null")!);
  return inner.type === "object" && inner.properties ? inner : null;
}

const isObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === "object" && !Array.isArray(v);

/** Which optional sections to draw as their fields while the spec sets them: those whose
 * presence a control of the form decides (the environment picker: env, env.server); any
 * other stays one JSON field, which can be cleared. */
export interface Expand { spec: unknown; paths: ReadonlySet<string> }

/** The fields of an object section, nested objects flattened into dotted paths
 * (model.tiny.hidden_size), and the optional ones of `expand` while set. */
export function sectionFields(root: JsonSchema, section: JsonSchema, prefix: string, expand?: Expand): Field[] {
  const obj = resolve(root, section);
  const out: Field[] = [];
  for (const [key, raw] of Object.entries(obj.properties ?? {})) {
    const path = prefix ? `${prefix}.${key}` : key;
    const child = resolve(root, raw);
    const optional = expand?.paths.has(path) && isObject(getPath(expand.spec, path)) ? optionalObject(root, raw) : null;
    if (child.type === "object" && child.properties) out.push(...sectionFields(root, child, path, expand));
    else if (optional) out.push(...sectionFields(root, optional, path, expand));
    else out.push(fieldOf(root, path, key, raw));
  }
  return out;
}

/** A full config of every default the schema states (fields whose default is computed by
 * the server, e.g. lists, are left out: the server fills them). */
export function defaultsOf(root: JsonSchema, node: JsonSchema = root, choose?: string): Record<string, unknown> {
  const obj = resolve(root, node);
  const out: Record<string, unknown> = {};
  for (const [key, raw] of Object.entries(obj.properties ?? {})) {
    const child = resolve(root, raw);
    if (child.oneOf && child.discriminator) {
      const member = unionMember(root, child, choose ?? discriminatorValues(child)[0]);
      if (member) {
        const d = defaultsOf(root, member);
        d[child.discriminator.propertyName] = choose ?? discriminatorValues(child)[0];
        out[key] = d;
      }
    } else if (child.type === "object" && child.properties) {
      out[key] = defaultsOf(root, child);
    } else if (raw.default !== undefined || child.default !== undefined) {
      out[key] = raw.default !== undefined ? raw.default : child.default;
    }
  }
  return out;
}

export function getPath(obj: unknown, path: string): unknown {
  let current: unknown = obj;
  for (const part of path.split(".")) {
    if (current === null || typeof current !== "object") return undefined;
    current = (current as Record<string, unknown>)[part];
  }
  return current;
}

/** A copy of `obj` with `path` set (undefined removes the key). */
export function setPath<T extends Record<string, unknown>>(obj: T, path: string, value: unknown): T {
  const [head, ...rest] = path.split(".");
  const copy: Record<string, unknown> = { ...obj };
  if (rest.length === 0) {
    if (value === undefined) delete copy[head];
    else copy[head] = value;
  } else {
    const child = copy[head];
    copy[head] = setPath((child && typeof child === "object" ? child : {}) as Record<string, unknown>,
      rest.join("."), value);
  }
  return copy as T;
}

/** The checks a field's schema states, for feedback as you type (the server's
 * validate_only has the last word: cross-field rules live there). */
export function checkField(field: Field, value: unknown): string | null {
  if (value === undefined) return null;
  if (value === null) return field.nullable ? null : "required";
  const n = field.node;
  if (field.kind === "integer" || field.kind === "number") {
    if (typeof value !== "number" || Number.isNaN(value)) return "must be a number";
    if (field.kind === "integer" && !Number.isInteger(value)) return "must be a whole number";
    if (n.minimum !== undefined && value < n.minimum) return `must be ≥ ${n.minimum}`;
    if (n.maximum !== undefined && value > n.maximum) return `must be ≤ ${n.maximum}`;
    if (n.exclusiveMinimum !== undefined && value <= n.exclusiveMinimum) return `must be > ${n.exclusiveMinimum}`;
    if (n.exclusiveMaximum !== undefined && value >= n.exclusiveMaximum) return `must be < ${n.exclusiveMaximum}`;
  }
  if (field.kind === "enum" && !field.options.includes(String(value))) {
    return `must be one of ${field.options.join(", ")}`;
  }
  if (field.kind === "json" && Array.isArray(value)) {
    if (n.minItems !== undefined && value.length < n.minItems) return `needs at least ${n.minItems} item(s)`;
    if (n.maxItems !== undefined && value.length > n.maxItems) return `takes at most ${n.maxItems} item(s)`;
  }
  return null;
}

export interface Group { id: string; title: string; sections: string[] }

/** How the form groups the spec's sections (anything new lands in "Other"). */
export const GROUPS: Group[] = [
  { id: "model", title: "Model & LoRA", sections: ["model", "lora"] },
  { id: "algorithm", title: "Algorithm", sections: ["algorithm"] },
  { id: "rollout", title: "Rollout", sections: ["rollout", "async"] },
  { id: "data", title: "Data & reward", sections: ["data", "reward"] },
  { id: "env", title: "Environment", sections: ["env"] },
  { id: "train", title: "Training", sections: ["train", "checkpoint", "seed"] },
  { id: "resources", title: "Resources", sections: ["resources"] },
];

export function groupOf(path: string): string {
  const section = path.split(".")[0];
  return GROUPS.find((g) => g.sections.includes(section))?.id ?? "other";
}
