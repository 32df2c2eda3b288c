import { useEffect, useMemo, useState } from "react";
import type { Sample } from "../api/types";
import { formatNumber } from "../lib/format";
import { Empty } from "../ui/States";
import { episodeView, searchableText } from "./episode";
import { EpisodeTurns } from "./EpisodeTurns";
import { termDetails, termKeys } from "./sampleTerms";

/** Some prompts of a step with their completions, rewards and advantages; a multi-turn
 * sample's completion is its episode, turn by turn. */
export function SampleInspector({ steps, older }: {
  /** oldest step first */
  steps: { step: number; items: Sample[] }[];
  /** more steps on the server, before the oldest shown */
  older?: { loading: boolean; load: () => void };
}) {
  const [chosen, setChosen] = useState<number | null>(null);
  const [followLatest, setFollowLatest] = useState(true);
  const [show, setShow] = useState<"all" | "rewarded" | "unrewarded">("all");
  const [text, setText] = useState("");
  const latest = steps.length ? steps[steps.length - 1].step : null;
  useEffect(() => { if (followLatest) setChosen(latest); }, [latest, followLatest]);
  const current = useMemo(() => steps.find((s) => s.step === chosen) ?? steps[steps.length - 1],
    [steps, chosen]);
  if (!current) return <Empty title="No samples yet">Each step sends <code>train.log_samples</code> of its samples.</Empty>;
  const rewards = current.items.map((i) => i.reward);
  const terms = termKeys(current.items);
  const groupMean = rewards.reduce((s, r) => s + r, 0) / Math.max(1, rewards.length);
  const groupStd = Math.sqrt(rewards.reduce((s, r) => s + (r - groupMean) ** 2, 0) / Math.max(1, rewards.length));
  const episodes = current.items.some((i) => i.turns?.length);
  const needle = text.trim().toLowerCase();
  const items = current.items.filter((i) =>
    (show === "all" || (show === "rewarded" ? i.reward > 0 : i.reward <= 0)) &&
    (!needle || searchableText(i).toLowerCase().includes(needle)));
  return (
    <div className="samples">
      <div className="samples-head">
        <label>Step{" "}
          <select value={current.step} onChange={(e) => { setFollowLatest(false); setChosen(Number(e.target.value)); }}>
            {steps.map((s) => <option key={s.step} value={s.step}>{s.step}</option>)}
          </select>
        </label>
        {older && (
          <button className="btn small" disabled={older.loading} onClick={older.load}>
            {older.loading ? "loading…" : "older steps"}
          </button>
        )}
        <label className="check"><input type="checkbox" checked={followLatest}
          onChange={(e) => setFollowLatest(e.target.checked)} /> follow latest</label>
        <select aria-label="Which samples" value={show} onChange={(e) => setShow(e.target.value as typeof show)}>
          <option value="all">all samples</option>
          <option value="rewarded">reward &gt; 0</option>
          <option value="unrewarded">reward ≤ 0</option>
        </select>
        <input type="search" placeholder="find in prompts, completions and turns" aria-label="Find in samples"
          value={text} onChange={(e) => setText(e.target.value)} />
        <span className="muted small">
          {items.length}/{current.items.length} shown · reward mean {formatNumber(groupMean)} ± {formatNumber(groupStd)}
        </span>
      </div>
      <div className="table-scroll">
        <table className="compact samples-table">
          <thead><tr><th>Prompt</th><th>{episodes ? "Episode" : "Completion"}</th><th className="num">Reward</th>{terms.map((k) => <th key={k} className="num" title="reward term (unweighted)">{k}</th>)}<th className="num">Advantage</th><th className="num">Adapter</th></tr></thead>
          <tbody>
            {items.map((item, i) => {
              const episode = episodeView(item);
              return (
                <tr key={i}>
                  <td><pre>{item.prompt}</pre></td>
                  <td>{episode ? <EpisodeTurns view={episode} /> : <pre>{item.completion}</pre>}</td>
                  <td className={`num ${item.reward > 0 ? "good" : "bad"}`}>{formatNumber(item.reward)}</td>
                  {terms.map((k) => <td key={k} className="num" title={termDetails(item, k)}>{formatNumber(item.terms?.[k])}</td>)}
                  <td className={`num ${item.advantage >= 0 ? "good" : "bad"}`}>{formatNumber(item.advantage)}</td>
                  <td className="num muted">{item.adapter_version ?? "—"}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
    </div>
  );
}
