// The launcher: a RunSpec from the generated form or as YAML, the backends and the
// environments the chosen cluster advertises, a number of seeds (one run per backend ×
// seed), checked by the server's validate_only as you edit; or a clone of an earlier run's
// experiment, with the diff against its config shown before launch; or a sweep over the
// spec's keys (its section, sweeps/SweepSection.tsx), launched onto its page. The form's
// state is one reducer (launcherState.ts); the check and the launch are a query and a
// mutation.
import { useMutation } from "@tanstack/react-query";
import { useEffect, useMemo, useReducer, useState } from "react";
import { Link, useNavigate, useSearchParams } from "react-router";
import { useClusters } from "../api/clusters";
import { launch, useConfig, useExperiment, useLaunchCheck, useSpecDiff, type LaunchBody } from "../api/experiments";
import { useRun } from "../api/runs";
import { useRunSpecSchema } from "../api/spec";
import { createSweep, useSweepCheck } from "../api/sweeps";
import { BACKENDS, type Cluster, type SpecError, type SweepCreateRequest, type TeamRef } from "../api/types";
import { formatValue } from "../lib/format";
import { BackendTag } from "../runs/StateBadge";
import { useSession } from "../session/SessionContext";
import { ErrorBox, Loading } from "../ui/States";
import { ImportPanel, ImportReport } from "./ImportPanel";
import { importedSpec, launchBody, launcherReducer, startFrom, type CloneSource, type LauncherState, type Spec } from "./launcherState";
import { defaultsOf, type JsonSchema } from "./schema";
import { SpecForm, type GroupControl } from "./SpecForm";
import { EnvironmentPicker } from "./EnvironmentPicker";
import { envSchema, offeredEnvironments, withEnvironment } from "./environments";
import { SweepSection } from "../sweeps/SweepSection";
import { newDraft, sweepRequest, type SweepDraft } from "../sweeps/sweepDraft";

// what the environment picker sets: env itself (none or one), its name, and its server
// section's presence (http's alone; once there, its keys are fields: env.server.url…)
const ENV_OWNED = ["env", "env.name", "env.server"];

function focusField(path: string): void {
  const input = document.querySelector<HTMLElement>(`[data-field="${CSS.escape(path)}"] input, [data-field="${CSS.escape(path)}"] select`);
  input?.scrollIntoView({ block: "center", behavior: "smooth" });
  input?.focus({ preventScroll: true });
}

/** `value`, once it has stopped changing for `ms`. */
function useSettled<T>(value: T, ms: number): T {
  const [settled, setSettled] = useState(value);
  useEffect(() => {
    const timer = window.setTimeout(() => setSettled(value), ms);
    return () => clearTimeout(timer);
  }, [value, ms]);
  return settled;
}

/** Loads what the form starts from (the schema's defaults, or the clone's source), then
 * hands it to the form. */
export default function LauncherPage() {
  const { team } = useSession();
  const [params] = useSearchParams();
  const cloneRunId = Number(params.get("clone")) || null;
  const schema = useRunSpecSchema();
  const clusters = useClusters(team?.id ?? null);
  const sourceRun = useRun(cloneRunId);
  const sourceExperiment = useExperiment(sourceRun.data?.experiment ?? null);
  const sourceConfig = useConfig(sourceExperiment.data?.config);

  if (!team) return <ErrorBox error={new Error("You are not in a team.")} />;
  const loadError = schema.error ?? clusters.error ?? sourceRun.error ?? sourceExperiment.error ?? sourceConfig.error;
  if (loadError) return <ErrorBox error={loadError} />;
  const loading = <Loading what={cloneRunId ? `Loading run #${cloneRunId}` : "Loading the run spec"} />;
  if (!schema.data) return loading;
  if (!cloneRunId) {
    return <LauncherForm key="new" team={team} schema={schema.data} clusters={clusters.data ?? []} clone={null}
      start={startFrom(defaultsOf(schema.data))} />;
  }
  const experiment = sourceExperiment.data;
  const config = sourceConfig.data;
  if (!sourceRun.data || !experiment || !config) return loading;
  const clone: CloneSource = { experiment: experiment.id, config: config.id, spec: config.spec };
  return <LauncherForm key={`clone-${cloneRunId}`} team={team} schema={schema.data} clusters={clusters.data ?? []}
    clone={clone} cloneRunId={cloneRunId}
    start={startFrom(config.spec, { name: `${experiment.name} (clone)`, description: experiment.description ?? "",
      tags: (experiment.tags ?? []).join(", "), backends: [sourceRun.data.backend] })} />;
}

function LauncherForm({ team, schema, clusters, clone, cloneRunId, start }: {
  team: TeamRef; schema: JsonSchema; clusters: Cluster[]; clone: CloneSource | null; cloneRunId?: number;
  start: LauncherState;
}) {
  const navigate = useNavigate();
  const [state, dispatch] = useReducer(launcherReducer, start);
  const { spec, name, description, tags, backends, seeds, mode, yamlText, yamlError } = state;

  const healthy = clusters.filter((c) => c.healthy);
  const clusterId = state.cluster !== undefined ? state.cluster : healthy.length === 1 ? healthy[0].id : null;
  const cluster = healthy.find((c) => c.id === clusterId) ?? null;
  const advertised = cluster ? cluster.backends : [...new Set(healthy.flatMap((c) => c.backends))];

  // a clone's edits are the server's diff of the form's spec against the source version
  const settledSpec = useSettled(spec, 300);
  const cloneDiff = useSpecDiff(clone ? { a: clone.config, b_spec: settledSpec } : null);
  const changes = clone && settledSpec === spec && !cloneDiff.isPlaceholderData ? cloneDiff.data?.changes ?? null : null;
  const body = useMemo(() => launchBody(state, team.id, clusterId, clone, changes), [state, team.id, clusterId, clone, changes]);
  // a sweep instead: its members differ in the section's keys, on the spec's one backend
  const [sweepDraft, setSweepDraft] = useState<SweepDraft | null>(null);
  const sweep = useMemo(() => sweepDraft && sweepRequest(sweepDraft, {
    team: team.id, name: name.trim() || "untitled", description, spec, cluster: clusterId,
    tags: tags.split(",").map((t) => t.trim()).filter(Boolean),
  }), [sweepDraft, team.id, name, description, spec, clusterId, tags]);
  // validate_only as you edit, once the form has been still for half a second
  const launchCheck = useLaunchCheck(useSettled(!sweepDraft && backends.length && !yamlError ? body : null, 500));
  const sweepCheck = useSweepCheck(useSettled(sweep?.body && !yamlError ? sweep.body : null, 500));
  const launchReport = launchCheck.data && "valid" in launchCheck.data ? launchCheck.data : null;
  const sweepReport = sweepCheck.data && "valid" in sweepCheck.data ? sweepCheck.data : null;
  // a spec the diff refuses (naming b_spec.<path>) has no edits to check: its refusal is the check's
  const diffError = sweepDraft ? null : cloneDiff.error;
  const report = sweepDraft ? sweepReport : diffError ? null : launchReport;
  const checkError = sweepDraft ? sweepCheck.error : diffError ?? launchCheck.error;
  const launching = useMutation({
    mutationFn: (what: LaunchBody) => launch(what),
    onSuccess: (answer) => {
      if ("experiment" in answer) {
        navigate(answer.runs.length === 1 ? `/runs/${answer.runs[0].id}` : `/?experiment=${answer.experiment.id}`);
      }
    },
  });
  const sweeping = useMutation({
    mutationFn: (what: SweepCreateRequest) => createSweep(what),
    onSuccess: (answer) => { if ("id" in answer) navigate(`/sweeps/${answer.id}`); },
  });

  const serverErrors = useMemo(() => {
    const out = new Map<string, string>();
    const all: SpecError[] = [...(report?.errors ?? [])];
    if (checkError) for (const [field, message] of Object.entries(checkError.fields)) all.push({ field, message });
    if (checkError?.field && !out.has(checkError.field)) all.push({ field: checkError.field, message: checkError.message });
    // the first problem of a field (a sweep's errors name each failing member of a key)
    for (const e of all) {
      const field = e.field.replace(/^(b_)?spec\./, "");
      if (!out.has(field)) out.set(field, e.message);
    }
    for (const [field, message] of Object.entries(sweep?.errors ?? {})) out.set(field, message);
    return out;
  }, [report, checkError, sweep]);
  const otherErrors = [...serverErrors].filter(([f]) => !f || ["backends", "cluster", "seeds", "name", "edits", "resources", "team"].includes(f) || f === "");

  const diff = cloneDiff.data?.changes ?? [];
  const runCount = backends.length * seeds;
  const valid = report?.valid === true && !yamlError && backends.length > 0 && (!sweepDraft || !!sweep?.body);
  const setSpec = (next: Spec) => dispatch({ type: "spec", spec: next });
  // env.name from the environments the cluster offers, which also decides whether env has a
  // server (http's); the rest of env as typed fields
  const environments = offeredEnvironments(healthy, cluster);
  const envName = typeof (spec.env as Spec | null)?.name === "string" ? (spec.env as Spec).name as string : null;
  const envControls: Record<string, GroupControl> = envSchema(schema) ? { env: { paths: ENV_OWNED, node: (
    <EnvironmentPicker offered={environments} current={envName} cluster={cluster} error={serverErrors.get("env.name")}
      onPick={(name) => setSpec(withEnvironment(schema, spec, name))} />) } } : {};

  return (
    <div className="launcher">
      <header className="launcher-head">
        <h1>{cloneRunId ? <>Clone run <Link to={`/runs/${cloneRunId}`}>#{cloneRunId}</Link></> : "Launch an experiment"}</h1>
      </header>
      <div className="launcher-grid">
        <section className="card launcher-main">
          <div className="row">
            <label className="grow">Name<input value={name} onChange={(e) => dispatch({ type: "field", field: "name", value: e.target.value })} placeholder="e.g. arithmetic torch vs vllm" aria-label="Experiment name" /></label>
            <label className="grow">Tags<input value={tags} onChange={(e) => dispatch({ type: "field", field: "tags", value: e.target.value })} placeholder="comma, separated" aria-label="Tags" /></label>
          </div>
          <label>Description<input value={description} onChange={(e) => dispatch({ type: "field", field: "description", value: e.target.value })} aria-label="Description" /></label>
          <div className="row">
            <label>Cluster
              <select aria-label="Cluster" value={clusterId ?? ""} onChange={(e) => dispatch({ type: "cluster", value: e.target.value ? Number(e.target.value) : null })}>
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
                      onChange={() => dispatch({ type: "toggleBackend", backend: b, schema: clone ? null : schema })} data-testid={`backend-${b}`} /> <BackendTag backend={b} />
                  </label>
                );
              })}
            </fieldset>
            {!sweepDraft && <label>Seeds<input type="number" min={1} max={16} value={seeds} className="num narrow" aria-label="Seeds"
              onChange={(e) => dispatch({ type: "seeds", value: Number(e.target.value) })} /></label>}
          </div>
          <label className="check">
            <input type="checkbox" checked={!!sweepDraft} data-testid="sweep-toggle"
              onChange={(e) => setSweepDraft(e.target.checked ? newDraft() : null)} /> Sweep over spec keys
          </label>
          {!sweepDraft && (
            <label className="check" title="a few steps of this spec on each backend's engine first: the runs start only if it passes (docs/preflight.md)">
              <input type="checkbox" checked={state.preflight} data-testid="preflight"
                onChange={(e) => dispatch({ type: "preflight", value: e.target.checked })} /> Pre-flight check first
            </label>
          )}
          {sweepDraft && <SweepSection draft={sweepDraft} onChange={setSweepDraft} errors={serverErrors} />}
          {otherErrors.map(([f, m]) => <div key={f} className="state-error"><code className="error-field">{f || "launch"}</code>{m}</div>)}

          <div className="tabs" role="tablist">
            <button role="tab" aria-selected={mode === "form"} className={mode === "form" ? "active" : ""} onClick={() => dispatch({ type: "mode", mode: "form" })}>Form</button>
            <button role="tab" aria-selected={mode === "yaml"} className={mode === "yaml" ? "active" : ""} onClick={() => dispatch({ type: "mode", mode: "yaml" })}>YAML</button>
            {!clone && <button role="tab" aria-selected={mode === "import"} className={mode === "import" ? "active" : ""}
              onClick={() => dispatch({ type: "mode", mode: "import" })}>Import verl / NeMo-RL</button>}
          </div>
          {mode === "import" ? (
            <ImportPanel teamId={team.id}
              onImported={(result) => dispatch({ type: "imported", spec: importedSpec(schema, result.spec), result })} />
          ) : mode === "form" ? (
            <SpecForm schema={schema} spec={spec} onChange={setSpec} serverErrors={serverErrors} controls={envControls} />
          ) : (
            <div className="yaml-editor">
              <textarea value={yamlText} spellCheck={false} onChange={(e) => dispatch({ type: "yaml", text: e.target.value })} aria-label="Config as YAML" rows={30} />
              {yamlError && <div className="state-error">YAML: {yamlError}</div>}
              {[...serverErrors].filter(([f]) => f.includes(".")).map(([f, m]) => (
                <div key={f} className="field-error"><code>{f}</code> {m}</div>))}
            </div>
          )}
        </section>

        <aside className="card launcher-side">
          <h2>Plan</h2>
          {sweepDraft ? (
            <p data-testid="sweep-plan">{sweepReport?.valid
              ? `a sweep of ${sweepReport.members.length} members, ${sweepReport.parallel} at once, on ${backends[0] ?? "the spec's backend"}`
              : "a sweep: its members once the check passes"}</p>
          ) : <>
            <p>{runCount} run{runCount === 1 ? "" : "s"}: {backends.length ? backends.join(", ") : "no backend"} × {seeds} seed{seeds === 1 ? "" : "s"}
            {state.preflight && <>, after a pre-flight check on {backends.length === 1 ? "its engine" : `each of the ${backends.length} engines`}</>}</p>
            {launchReport?.runs?.length ? (
              <ul className="plan">
                {launchReport.runs.map((r, i) => <li key={i}><BackendTag backend={r.backend} /> seed {r.seed}{r.gpus ? ` · ${r.gpus} GPU` : ""}</li>)}
              </ul>
            ) : null}
          </>}
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
          {state.imported && <ImportReport report={state.imported} />}
          {clone && (
            <div className="clone-diff">
              <h3>Changes from the source</h3>
              {diff.length === 0 ? <p className="muted">none yet: edit the config</p> : (
                <table className="compact diff-table" data-testid="clone-diff">
                  <thead><tr><th>Key</th><th>Source</th><th>New</th></tr></thead>
                  <tbody>{diff.map((d) => (
                    <tr key={d.path}><td><code>{d.path}</code></td>
                      <td className="mono old">{formatValue(d.only_in === "b" ? undefined : d.a)}</td>
                      <td className="mono new">{formatValue(d.only_in === "a" ? undefined : d.b)}</td></tr>))}</tbody>
                </table>
              )}
            </div>
          )}
          <ErrorBox error={launching.error ?? sweeping.error} />
          {sweepDraft ? (
            <button className="btn primary wide" disabled={!valid || sweeping.isPending || !sweep?.body}
              onClick={() => sweep?.body && sweeping.mutate(sweep.body)} data-testid="launch">
              {sweeping.isPending ? "Launching…" : `Launch a sweep of ${sweepReport?.members.length ?? "…"} members`}
            </button>
          ) : (
            <button className="btn primary wide" disabled={!valid || !body || launching.isPending} onClick={() => body && launching.mutate(body)}
              data-testid="launch">
              {launching.isPending ? "Launching…" : `Launch ${runCount} run${runCount === 1 ? "" : "s"}`}
            </button>
          )}
        </aside>
      </div>
    </div>
  );
}
