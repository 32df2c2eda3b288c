import { useEffect, useRef } from "react";
import type { ApiError } from "../api/client";
import type { LogLine } from "../api/liveStore";
import { ErrorBox } from "../ui/States";

function clock(t: number): string {
  return new Date(t * 1000).toISOString().slice(11, 19);
}

export interface OlderLines {
  /** false once the server said there is nothing older */
  more: boolean;
  loading: boolean;
  error: ApiError | null;
  load: () => void;
}

/** The last lines of the run's log; follows new lines unless you scrolled up to read, and
 * pages further back on demand (`older`). */
export function LogTail({ lines, older }: { lines: LogLine[]; older?: OlderLines }) {
  const box = useRef<HTMLPreElement>(null);
  const follow = useRef(true);
  useEffect(() => {
    const el = box.current;
    if (el && follow.current) el.scrollTop = el.scrollHeight;
  }, [lines.length, lines]);
  return (
    <>
      {older?.error && <ErrorBox error={older.error} onRetry={older.load} />}
      <pre className="log-tail" ref={box} data-testid="log-tail"
        onScroll={(e) => {
          const el = e.currentTarget;
          follow.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
        }}>
        {older?.more && lines.length > 0 && (
          <button className="linklike small log-older" disabled={older.loading}
            onClick={() => { follow.current = false; older.load(); }}>
            {older.loading ? "loading older lines…" : "load older lines"}
          </button>
        )}
        {lines.length === 0 && <span className="muted">no log lines yet</span>}
        {lines.map((l, i) => (
          <div key={l.id ?? `p${i}`} className={`log-line level-${l.level}`}>
            <span className="log-time">{clock(l.time)}</span> <span className="log-level">{l.level}</span> {l.message}
          </div>
        ))}
      </pre>
    </>
  );
}
