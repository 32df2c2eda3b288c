// A form generated from the RunSpec JSON Schema: one fieldset per group, every field with its
// default, its description, and its error inline (from the schema's bounds as you type, and
// from the server's validate_only).
import { useMemo, useState, type ReactNode } from "react";
import {
  checkField, getPath, GROUPS, groupOf, resolve, sectionFields, setPath, unionMember, type Field, type JsonSchema,
} from "./schema";

type Spec = Record<string, unknown>;

/** Every field of the spec; the rollout section follows the chosen backend's member; the
 * optional sections of `expand` (paths) are their fields while set. */
export function specFields(schema: JsonSchema, spec: Spec, expandPaths: ReadonlySet<string> = new Set()): Field[] {
  const expand = { spec, paths: expandPaths };
  const out: Field[] = [];
  for (const [section, raw] of Object.entries(schema.properties ?? {})) {
    const node = resolve(schema, raw);
    if (node.oneOf && node.discriminator) {
      const member = unionMember(schema, node, getPath(spec, `${section}.${node.discriminator.propertyName}`));
      if (member) out.push(...sectionFields(schema, member, section).filter((f) => !f.readOnly));
    } else if (node.type === "object" || node.properties) {
      out.push(...sectionFields(schema, node, section, expand));
    } else {
      out.push(...sectionFields(schema, { type: "object", properties: { [section]: raw } }, "", expand));
    }
  }
  return out;
}

function parseInput(field: Field, text: string): unknown {
  if (text === "") return field.nullable ? null : undefined;
  if (field.kind === "integer" || field.kind === "number") return Number(text);
  if (field.kind === "json") {
    try { return JSON.parse(text); } catch { return text; }
  }
  return text;
}

function display(value: unknown): string {
  if (value === undefined || value === null) return "";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function FieldInput({ field, value, error, onChange }: {
  field: Field; value: unknown; error: string | null; onChange: (v: unknown) => void;
}) {
  const id = `f-${field.path}`;
  const placeholder = field.default === undefined ? "server default" : display(field.default) || "none";
  const changed = value !== undefined && JSON.stringify(value) !== JSON.stringify(field.default);
  let input;
  if (field.kind === "boolean") {
    input = <input id={id} type="checkbox" checked={Boolean(value ?? field.default)} onChange={(e) => onChange(e.target.checked)} />;
  } else if (field.kind === "enum") {
    input = (
      <select id={id} value={display(value ?? field.default)} onChange={(e) => onChange(e.target.value)}>
        {field.options.map((o) => <option key={o}>{o}</option>)}
      </select>
    );
  } else {
    input = (
      <JsonOrTextInput id={id} field={field} value={value} placeholder={placeholder} onChange={onChange} />
    );
  }
  return (
    <div className={`field ${error ? "has-error" : ""} ${changed ? "changed" : ""}`} data-field={field.path}>
      <label htmlFor={id} title={field.path}>{field.title}</label>
      {input}
      {field.description && <span className="help">{field.description}</span>}
      {error && <span className="field-error" role="alert">{error}</span>}
    </div>
  );
}

/** Keeps what is typed while it does not parse yet (e.g. "0." or a half-written list). */
function JsonOrTextInput({ id, field, value, placeholder, onChange }: {
  id: string; field: Field; value: unknown; placeholder: string; onChange: (v: unknown) => void;
}) {
  const [draft, setDraft] = useState<string | null>(null);
  const numeric = field.kind === "integer" || field.kind === "number";
  return (
    <input id={id} inputMode={numeric ? "decimal" : undefined} className={numeric ? "num" : field.kind === "json" ? "mono" : ""}
      value={draft ?? display(value)} placeholder={placeholder}
      onChange={(e) => { setDraft(e.target.value); onChange(parseInput(field, e.target.value)); }}
      onBlur={() => setDraft(null)} />
  );
}

/** A group's fields by spec section (model / model.tiny / lora …), titled when the group
 * holds more than one. */
function subsections(fields: Field[]): [string, Field[]][] {
  const bySection = new Map<string, Field[]>();
  for (const f of fields) {
    const parts = f.path.split(".");
    const section = parts.length > 2 ? parts.slice(0, -1).join(".") : parts.length === 2 ? parts[0] : "";
    bySection.set(section, [...(bySection.get(section) ?? []), f]);
  }
  const entries = [...bySection];
  if (entries.length === 1) return [["", entries[0][1]]];
  return entries.map(([section, list]) => [section || "general", list]);
}

/** A group's own control, above its fields, for what the schema alone cannot offer (the
 * environments of the chosen cluster); the paths it edits are not drawn as fields, and an
 * optional section among them is drawn as its keys while set. */
export interface GroupControl { node: ReactNode; paths: string[] }

export function SpecForm({ schema, spec, onChange, serverErrors, controls = {} }: {
  schema: JsonSchema; spec: Spec; onChange: (spec: Spec) => void; serverErrors: Map<string, string>;
  /** by group id */
  controls?: Record<string, GroupControl>;
}) {
  const fields = useMemo(() => {
    // a control's optional sections are drawn as their keys once it has set them
    const owned = new Set(Object.values(controls).flatMap((c) => c.paths));
    return specFields(schema, spec, owned).filter((f) => !owned.has(f.path));
  }, [schema, spec, controls]);
  const groups = useMemo(() => {
    const byGroup = new Map<string, Field[]>();
    for (const f of fields) {
      const g = groupOf(f.path);
      byGroup.set(g, [...(byGroup.get(g) ?? []), f]);
    }
    return [...GROUPS, { id: "other", title: "Other", sections: [] }]
      .filter((g) => byGroup.has(g.id) || controls[g.id]).map((g) => ({ ...g, fields: byGroup.get(g.id) ?? [] }));
  }, [fields, controls]);
  const [open, setOpen] = useState<Set<string>>(() => new Set(["model", "algorithm", "rollout", "env", "train"]));

  return (
    <div className="spec-form">
      {groups.map((g) => {
        const errors = g.fields.filter((f) => serverErrors.has(f.path) || checkField(f, getPath(spec, f.path))).length
          + (controls[g.id]?.paths.filter((p) => serverErrors.has(p)).length ?? 0);
        const isOpen = open.has(g.id) || errors > 0;
        return (
          <fieldset key={g.id} className={`group ${isOpen ? "open" : ""}`}>
            <legend>
              <button type="button" className="linklike" aria-expanded={isOpen}
                onClick={() => setOpen((s) => { const n = new Set(s); if (n.has(g.id)) n.delete(g.id); else n.add(g.id); return n; })}>
                {isOpen ? "▾" : "▸"} {g.title}
              </button>
              {errors > 0 && <span className="badge tone-bad">{errors}</span>}
            </legend>
            {isOpen && controls[g.id]?.node}
            {isOpen && g.fields.length > 0 && subsections(g.fields).map(([title, list]) => (
              <div key={title}>
                {title && <h4 className="subsection">{title}</h4>}
                <div className="fields">
                  {list.map((f) => {
                    const value = getPath(spec, f.path);
                    return <FieldInput key={f.path} field={f} value={value}
                      error={serverErrors.get(f.path) ?? checkField(f, value)}
                      onChange={(v) => onChange(setPath(spec, f.path, v))} />;
                  })}
                </div>
              </div>
            ))}
          </fieldset>
        );
      })}
    </div>
  );
}
