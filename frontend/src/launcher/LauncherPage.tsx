// The launcher: a RunSpec from the generated form or as YAML, the backends the chosen
// cluster advertises, a number of seeds (one run per backend × seed), checked by the
// server's validate_only as you edit; or a clone of an earlier run's experiment, with the
// diff against its config shown before launch.
import { useEffect, useMemo, useRef, useState } from "react";
import { Link, useNavigate, useSearchParams } from "react-router";
import { parse, stringify } from "yaml";
import { ApiError } from "../api/client";
import { useClusters } from "../api/clusters";
import { cloneExperiment, launchExperiment, useConfig, useExperiment } from "../api/experiments";
import { useRun } from "../api/runs";
import { useRunSpecSchema } from "../api/spec";
import { BACKENDS, type Backend, type LaunchResponse, type SpecError } from "../api/types";
import { configDiff, formatValue } from "../lib/configDiff";
import { BackendTag } from "../runs/StateBadge";
import { useSession } from "../session/SessionContext";
import { ErrorBox, Loading } from "../ui/States";
import { defaultsOf, getPath, type JsonSchema } from "./schema";
import { SpecForm } from "./SpecForm";

type Spec = Record<string, unknown>;
type Report = Extract<LaunchResponse, { valid: boolean }>;

/** A new primary backend: its member's defaults, keeping the values both members share. */
function switchBackend(schema: JsonSchema, spec: Spec, backend: Backend): Spec {
  const fresh = defaultsOf(schema, schema, backend).rollout as Spec;
  const old = (spec.rollout ?? {}) as Spec;
  const rollout: Spec = { ...fresh };
  for (const key of Object.keys(fresh)) if (key in old && key !== "backend") rollout[key] = old[key];
  return { ...spec, rollout };
}

/** dotted path → new value, for the clone endpoint's `edits` */
function editsBetween(source: Spec, edited: Spec): Record<string, unknown> {
  const edits: Record<string, unknown> = {};
  // a key deleted in the YAML cannot be expressed as an edit: the source's value stays
  for (const d of configDiff([source, edited])) if (d.values[1] !== undefined) edits[d.path] = d.values[1];
  return edits;
}

function focusField(path: string): void {
  const input = document.querySelector<HTMLElement>(`[data-field="${CSS.escape(path)}"] input, [data-field="${CSS.escape(path)}"] select`);
  input?.scrollIntoView({ block: "center", behavior: "smooth" });
  input?.focus({ preventScroll: true });
}

export default function LauncherPage() {
  const { team } = useSession();
  const navigate = useNavigate();
  const [params] = useSearchParams();
  const cloneRunId = Number(params.get("clone")) || null;
  const schema = useRunSpecSchema();
  const clusters = useClusters(team?.id ?? null);
  const sourceRun = useRun(cloneRunId);
  const sourceExperiment = useExperiment(sourceRun.data?.experiment ?? null);
  const sourceConfig = useConfig(sourceExperiment.data?.config);
  const source = cloneRunId ? (sourceConfig.data?.spec as Spec | undefined) : undefined;

  const [spec, setSpec] = useState<Spec | null>(null);
  const [name, setName] = useState("");
  const [description, setDescription] = useState("");
  const [tags, setTags] = useState("");
  const [backends, setBackends] = useState<Backend[]>([]);
  const [seeds, setSeeds] = useState(1);
  // undefined: not chosen yet (the only cluster, or any); null: any cluster of the team
  const [clusterChoice, setClusterChoice] = useState<number | null | undefined>(undefined);
  const [mode, setMode] = useState<"form" | "yaml">("form");
  const [yamlText, setYamlText] = useState("");
  const [yamlError, setYamlError] = useState<string | null>(null);
  const [report, setReport] = useState<Report | null>(null);
  const [checkError, setCheckError] = useState<ApiError | null>(null);
  const [launching, setLaunching] = useState(false);
  const [launchError, setLaunchError] = useState<ApiError | null>(null);

  // the starting spec: the source's when cloning, else the schema's defaults
  useEffect(() => {
    if (spec || !schema.data) return;
    if (cloneRunId) {
      if (!source || !sourceExperiment.data || !sourceRun.data) return;
      setSpec(source);
      setName(`${sourceExperiment.data.name} (clone)`);
      setDescription(sourceExperiment.data.description ?? "");
      setTags((sourceExperiment.data.tags ?? []).join(", "));
      setBackends([sourceRun.data.backend]);
    } else {
      const defaults = defaultsOf(schema.data);
      setSpec(defaults);
      setBackends([getPath(defaults, "rollout.backend") as Backend]);
    }
  }, [schema.data, source, sourceExperiment.data, sourceRun.data, cloneRunId, spec]);

  const healthy = (clusters.data ?? []).filter((c) => c.healthy);
  const clusterId = clusterChoice !== undefined ? clusterChoice : healthy.length === 1 ? healthy[0].id : null;
  const cluster = healthy.find((c) => c.id === clusterId) ?? null;
  const advertised: Backend[] = cluster ? cluster.backends
    : [...new Set(healthy.flatMap((c) => c.backends))];

  // the first selected backend is the spec's own rollout.backend (its options show in the form)
  function toggleBackend(b: Backend) {
    const next = backends.includes(b) ? backends.filter((x) => x !== b) : [...backends, b];
    setBackends(next);
    // (a clone keeps its source's rollout section: the server gives every run its own
    // backend and drops the options of the others, so no edit is needed for that)
    if (!cloneRunId && spec && schema.data && next.length && next[0] !== getPath(spec, "rollout.backend")) {
      setSpec(switchBackend(schema.data, spec, next[0]));
    }
  }

  const request = useMemo(() => spec && team ? {
    name: name.trim() || "untitled", description, seeds, backends,
    tags: tags.split(",").map((t) => t.trim()).filter(Boolean), cluster: clusterId,
  } : null, [spec, team, name, description, seeds, backends, tags, clusterId]);

  async function submit(validateOnly: boolean): Promise<LaunchResponse | undefined> {
    if (!spec || !request || !team) return;
    const body = { ...request, validate_only: validateOnly };
    if (cloneRunId && source && sourceExperiment.data) {
      return cloneExperiment(sourceExperiment.data.id, { ...body, edits: editsBetween(source, spec),
        config: sourceExperiment.data.config });
    }
    return launchExperiment({ ...body, team: team.id, spec });
  }

  // validate_only as you edit (debounced; only the newest answer counts)
  const generation = useRef(0);
  useEffect(() => {
    if (!spec || !request || !backends.length || yamlError) return;
    const mine = ++generation.current;
    const timer = window.setTimeout(async () => {
      try {
        const answer = await submit(true);
        if (mine !== generation.current || !answer) return;
        setReport("valid" in answer ? answer : null);
        setCheckError(null);
      } catch (err) {
        if (mine !== generation.current) return;
        setCheckError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
        setReport(null);
      }
    }, 500);
    return () => clearTimeout(timer);
  // eslint-disable-next-line react-hooks/exhaustive-deps -- submit reads these
  }, [spec, request, yamlError]);

  const serverErrors = useMemo(() => {
    const out = new Map<string, string>();
    const all: SpecError[] = [...(report?.errors ?? [])];
    if (checkError) for (const [field, message] of Object.entries(checkError.fields)) all.push({ field, message });
    if (checkError?.field && !out.has(checkError.field)) all.push({ field: checkError.field, message: checkError.message });
    for (const e of all) out.set(e.field.replace(/^spec\./, ""), e.message);
    return out;
  }, [report, checkError]);
  const otherErrors = [...serverErrors].filter(([f]) => !f || ["backends", "cluster", "seeds", "name", "edits", "resources", "team"].includes(f) || f === "");

  async function launch() {
    setLaunching(true);
    setLaunchError(null);
    try {
      const answer = await submit(false);
      if (answer && "experiment" in answer) {
        navigate(answer.runs.length === 1 ? `/runs/${answer.runs[0].id}` : `/?experiment=${answer.experiment.id}`);
      }
    } catch (err) {
      setLaunchError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    } finally {
      setLaunching(false);
    }
  }

  function setModeTo(next: "form" | "yaml") {
    if (next === "yaml" && spec) { setYamlText(stringify(spec)); setYamlError(null); }
    setMode(next);
  }
  function editYaml(text: string) {
    setYamlText(text);
    try {
      const parsed = parse(text);
      if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error("the config must be a mapping of sections");
      setSpec(parsed as Spec);
      setYamlError(null);
      const b = getPath(parsed, "rollout.backend") as Backend | undefined;
      if (b && backends[0] !== b) setBackends([b, ...backends.filter((x) => x !== b)]);
    } catch (err) {
      setYamlError((err as Error).message);
    }
  }

  if (!team) return <ErrorBox error={new Error("You are not in a team.")} />;
  const loadError = schema.error ?? clusters.error ?? sourceRun.error ?? sourceExperiment.error ?? sourceConfig.error;
  if (loadError) return <ErrorBox error={loadError} />;
  if (!spec || !schema.data) return <Loading what={cloneRunId ? `Loading run #${cloneRunId}` : "Loading the run spec"} />;

  const diff = source ? configDiff([source, spec]) : [];
  const runCount = backends.length * seeds;
  const valid = report?.valid === true && !yamlError && backends.length > 0;

  return (
    <div className="launcher">
      <header className="launcher-head">
        <h1>{cloneRunId ? <>Clone run <Link to={`/runs/${cloneRunId}`}>#{cloneRunId}</Link></> : "Launch an experiment"}</h1>
      </header>
      <div className="launcher-grid">
        <section className="card launcher-main">
          <div className="row">
            <label className="grow">Name<input value={name} onChange={(e) => setName(e.target.value)} placeholder="e.g. arithmetic torch vs vllm" aria-label="Experiment name" /></label>
            <label className="grow">Tags<input value={tags} onChange={(e) => setTags(e.target.value)} placeholder="comma, separated" aria-label="Tags" /></label>
          </div>
          <label>Description<input value={description} onChange={(e) => setDescription(e.target.value)} aria-label="Description" /></label>
          <div className="row">
            <label>Cluster
              <select aria-label="Cluster" value={clusterId ?? ""} onChange={(e) => setClusterChoice(e.target.value ? Number(e.target.value) : null)}>
                {healthy.length === 0 ? <option value="">no healthy cluster</option>
                  : healthy.length > 1 && <option value="">any cluster of the team</option>}
                {healthy.map((c) => <option key={c.id} value={c.id}>{c.name} ({c.backends.join(", ") || "no backends"})</option>)}
              </select>
            </label>
            <fieldset className="backends" aria-label="Rollout backends">
              <legend>Rollout backends</legend>
              {BACKENDS.map((b) => {
                const offered = advertised.includes(b);
                return (
                  <label key={b} className={`check ${offered ? "" : "disabled"}`} title={offered ? "" : "not advertised by this cluster"}>
                    <input type="checkbox" checked={backends.includes(b)} disabled={!offered && !backends.includes(b)}
                      onChange={() => toggleBackend(b)} data-testid={`backend-${b}`} /> <BackendTag backend={b} />
                  </label>
                );
              })}
            </fieldset>
            <label>Seeds<input type="number" min={1} max={16} value={seeds} className="num narrow" aria-label="Seeds"
              onChange={(e) => setSeeds(Math.max(1, Number(e.target.value) || 1))} /></label>
          </div>
          {otherErrors.map(([f, m]) => <div key={f} className="state-error"><code className="error-field">{f || "launch"}</code>{m}</div>)}

          <div className="tabs" role="tablist">
            <button role="tab" aria-selected={mode === "form"} className={mode === "form" ? "active" : ""} onClick={() => setModeTo("form")}>Form</button>
            <button role="tab" aria-selected={mode === "yaml"} className={mode === "yaml" ? "active" : ""} onClick={() => setModeTo("yaml")}>YAML</button>
          </div>
          {mode === "form" ? (
            <SpecForm schema={schema.data} spec={spec} onChange={setSpec} serverErrors={serverErrors} />
          ) : (
            <div className="yaml-editor">
              <textarea value={yamlText} spellCheck={false} onChange={(e) => editYaml(e.target.value)} aria-label="Config as YAML" rows={30} />
              {yamlError && <div className="state-error">YAML: {yamlError}</div>}
              {[...serverErrors].filter(([f]) => f.includes(".")).map(([f, m]) => (
                <div key={f} className="field-error"><code>{f}</code> {m}</div>))}
            </div>
          )}
        </section>

        <aside className="card launcher-side">
          <h2>Plan</h2>
          <p>{runCount} run{runCount === 1 ? "" : "s"}: {backends.length ? backends.join(", ") : "no backend"} × {seeds} seed{seeds === 1 ? "" : "s"}</p>
          {report?.runs?.length ? (
            <ul className="plan">
              {report.runs.map((r, i) => <li key={i}><BackendTag backend={r.backend} /> seed {r.seed}{r.gpus ? ` · ${r.gpus} GPU` : ""}</li>)}
            </ul>
          ) : null}
          <div className={`check-status ${valid ? "ok" : report || checkError ? "bad" : ""}`} data-testid="validation">
            {yamlError ? "the YAML does not parse" : !report && !checkError ? "checking…" : valid ? "✓ valid" :
              `${serverErrors.size || 1} problem${serverErrors.size === 1 ? "" : "s"}`}
          </div>
          {serverErrors.size > 0 && (
            <ul className="problems">
              {[...serverErrors].map(([field, message]) => (
                <li key={field}>
                  <button type="button" className="linklike" onClick={() => focusField(field)}>
                    <code>{field || "launch"}</code>
                  </button> {message}
                </li>
              ))}
            </ul>
          )}
          {source && (
            <div className="clone-diff">
              <h3>Changes from the source</h3>
              {diff.length === 0 ? <p className="muted">none yet: edit the config</p> : (
                <table className="compact diff-table" data-testid="clone-diff">
                  <thead><tr><th>Key</th><th>Source</th><th>New</th></tr></thead>
                  <tbody>{diff.map((d) => (
                    <tr key={d.path}><td><code>{d.path}</code></td><td className="mono old">{formatValue(d.values[0])}</td>
                      <td className="mono new">{formatValue(d.values[1])}</td></tr>))}</tbody>
                </table>
              )}
            </div>
          )}
          <ErrorBox error={launchError} />
          <button className="btn primary wide" disabled={!valid || launching} onClick={() => void launch()} data-testid="launch">
            {launching ? "Launching…" : `Launch ${runCount} run${runCount === 1 ? "" : "s"}`}
          </button>
        </aside>
      </div>
    </div>
  );
}
