import { useEffect, useRef } from "react";
import type { LogLine } from "../api/liveStore";

function clock(t: number): string {
  return new Date(t * 1000).toISOString().slice(11, 19);
}

/** The last lines of the run's log; follows new lines unless you scrolled up to read. */
export function LogTail({ lines }: { lines: LogLine[] }) {
  const box = useRef<HTMLPreElement>(null);
  const follow = useRef(true);
  useEffect(() => {
    const el = box.current;
    if (el && follow.current) el.scrollTop = el.scrollHeight;
  }, [lines.length, lines]);
  return (
    <pre className="log-tail" ref={box} data-testid="log-tail"
      onScroll={(e) => {
        const el = e.currentTarget;
        follow.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
      }}>
      {lines.length === 0 && <span className="muted">no log lines yet</span>}
      {lines.map((l, i) => (
        <div key={i} className={`log-line level-${l.level}`}>
          <span className="log-time">{clock(l.time)}</span> <span className="log-level">{l.level}</span> {l.message}
        </div>
      ))}
    </pre>
  );
}
