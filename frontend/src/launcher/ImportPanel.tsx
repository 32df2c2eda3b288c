// The launcher's Import tab: a verl or NeMo-RL config as their users write it (a YAML file,
// a recipe inheriting its base through `defaults:`, a command line of overrides, or both)
// sent to POST /spec/import; its spec fills the form, and every key it left out is listed
// (ImportReport) with the file that set it and why.
import { useMutation } from "@tanstack/react-query";
import { useState } from "react";
import { useDatasets } from "../api/datasets";
import { importSpec } from "../api/spec";
import type { ConfigImportRequest, SpecImport, UnmappedKey } from "../api/types";
import { ErrorBox } from "../ui/States";

export function ImportPanel({ teamId, onImported }: { teamId: number; onImported: (result: SpecImport) => void }) {
  const [config, setConfig] = useState("");
  const [command, setCommand] = useState("");
  const [source, setSource] = useState<"" | "verl" | "nemo-rl">("");
  const [dataset, setDataset] = useState<number | null>(null);
  const datasets = useDatasets(teamId);
  const importing = useMutation({
    mutationFn: (body: ConfigImportRequest) => importSpec(body),
    onSuccess: onImported,
  });
  const empty = !config.trim() && !command.trim();
  return (
    <div className="import-panel" data-testid="import-panel">
      <p className="muted">
        Paste a verl or NeMo-RL GRPO config: a YAML file (a NeMo-RL recipe brings its base through
        <code> defaults:</code>), the command line that runs it, or both. What Paddock has no setting for is
        listed after the import.
      </p>
      <label>Config (YAML)
        <textarea value={config} onChange={(e) => setConfig(e.target.value)} rows={14} spellCheck={false}
          aria-label="Config to import" placeholder={"defaults: ../../grpo_math_1B.yaml\npolicy:\n  model_name: …"} />
      </label>
      <label>Command line
        <textarea value={command} onChange={(e) => setCommand(e.target.value)} rows={6} spellCheck={false}
          aria-label="Command line to import" placeholder="python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo …" />
      </label>
      <div className="row">
        <label>From
          <select value={source} onChange={(e) => setSource(e.target.value as typeof source)} aria-label="Import from">
            <option value="">guess</option><option value="verl">verl</option><option value="nemo-rl">NeMo-RL</option>
          </select>
        </label>
        <label className="grow">Dataset (its rows turn epochs into steps)
          <select value={dataset ?? ""} onChange={(e) => setDataset(e.target.value ? Number(e.target.value) : null)}
            aria-label="Dataset for the import">
            <option value="">the config's own files</option>
            {(datasets.data ?? []).map((d) => <option key={d.id} value={d.id}>{d.name} ({d.rows} rows)</option>)}
          </select>
        </label>
      </div>
      <ErrorBox error={importing.error} />
      <button type="button" className="btn primary" disabled={empty || importing.isPending} data-testid="import"
        onClick={() => importing.mutate({ config, command, source: source || null, dataset })}>
        {importing.isPending ? "Importing…" : "Import into the form"}
      </button>
    </div>
  );
}

/** What the last import read and left out, grouped by the file that set each key. */
export function ImportReport({ report }: { report: Omit<SpecImport, "spec"> }) {
  const byFile = new Map<string, UnmappedKey[]>();
  for (const u of report.unmapped) byFile.set(u.origin, [...(byFile.get(u.origin) ?? []), u]);
  return (
    <div className="import-report" data-testid="import-report">
      <h3>Imported from {report.source === "verl" ? "verl" : "NeMo-RL"}</h3>
      <p className="muted">read: {report.files.join(" → ")}</p>
      <p>{report.unmapped.length} key{report.unmapped.length === 1 ? "" : "s"} not carried over:</p>
      {[...byFile].map(([file, keys]) => (
        <details key={file} open={file !== report.files[0] || byFile.size === 1}>
          <summary>{file} ({keys.length})</summary>
          <ul className="unmapped">
            {keys.map((u) => <li key={u.key}><code>{u.key}</code>{u.note ? <span className="muted"> {u.note}</span> : null}</li>)}
          </ul>
        </details>
      ))}
    </div>
  );
}
