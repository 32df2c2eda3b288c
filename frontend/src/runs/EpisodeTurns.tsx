import type { EpisodeView } from "./episode";
import { spanLabel, versionLabel } from "./episode";

const MASKED_TITLE = "masked: attended to, not trained on (loss mask 0)";

/** A multi-turn sample's completion: the model's turns with their adapter versions, the
 * environment's answers between them, the masked ones marked as not trained on. */
export function EpisodeTurns({ view }: { view: EpisodeView }) {
  return (
    <div className="episode" data-testid="episode">
      <div className="episode-summary muted small">
        {view.modelTurns} model turn{view.modelTurns === 1 ? "" : "s"} · {view.trained} tokens trained on
        {view.masked > 0 && <> · <span title={view.maskedSpans.map(([a, b]) => spanLabel(a, b)).join(", ")}>
          {view.masked} masked</span></>}
        {view.failed && <> · <span className="bad">failed: nothing trained on</span></>}
      </div>
      <ol className="turns">
        {view.segments.map((s, i) => {
          if (s.kind === "note") {
            return <li key={i} className="turn turn-note masked" data-role="note"><pre>{s.text}</pre></li>;
          }
          const masked = s.masked && <span className="masked-mark" title={MASKED_TITLE}>masked · not trained on</span>;
          const tokens = <span className="muted" title={spanLabel(s.from, s.to)}>{s.to - s.from} tokens</span>;
          if (s.kind === "model") {
            return (
              <li key={i} className={`turn turn-model ${s.masked ? "masked" : ""}`} data-role="model">
                <div className="turn-head">
                  <span className="turn-role">model</span> <span className="muted">turn {s.turn}</span> {tokens}
                  {" "}<span className="turn-version" title={s.versions.length > 1
                    ? "the adapter was updated during this turn" : "the adapter version that wrote it"}>
                    adapter {versionLabel(s.versions)}</span> {masked}
                </div>
                <pre>{s.text}</pre>
              </li>
            );
          }
          return (
            <li key={i} className="turn turn-env masked" data-role={s.messages[0].role}>
              <div className="turn-head">
                <span className="turn-role">{[...new Set(s.messages.map((m) => m.role))].join(", ")}</span> {tokens} {masked}
              </div>
              {s.messages.map((m, j) => (
                <div key={j} className="turn-message">
                  {m.name && <span className="muted small">{m.name} →</span>}
                  <pre>{m.text}</pre>
                </div>
              ))}
            </li>
          );
        })}
      </ol>
    </div>
  );
}
