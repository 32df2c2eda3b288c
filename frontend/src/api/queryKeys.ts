// Every query's key, in one place: a key names the endpoint and its parameters, so one
// answer is cached once, a prefetch lands where its hook looks, and a mutation invalidates
// exactly what it changed. Metric reads live under "metrics", apart from the run rows, so
// refreshing a run's row (a pause, a launch) never reads its history again.
import type { MetricsSample, RunFilters } from "./types";

/** One read of a metrics endpoint (the keys, the resolution, and an x window if zoomed). */
export interface MetricsRead {
  keys?: readonly string[];
  maxPoints: number;
  sample?: MetricsSample;
  x?: "time" | "step";
  xMin?: number;
  xMax?: number;
}

/** Every run of an experiment, or runs named one by one. */
export type CompareSource = { experiment: number } | { runs: readonly number[] };

export type RunListQuery = RunFilters & { team?: number | null; limit: number };

export const queryKeys = {
  session: ["session"] as const,
  runs: {
    lists: ["runs", "list"] as const,
    list: (query: RunListQuery) => ["runs", "list", query] as const,
    detail: (id: number) => ["runs", "detail", id] as const,
    checkpoints: (id: number) => ["runs", "checkpoints", id] as const,
    /** older log and status events (events?before=), paged */
    events: (id: number) => ["runs", "events", id] as const,
    /** sample sets, newest step first, paged */
    samples: (id: number) => ["runs", "samples", id] as const,
  },
  experiments: {
    all: ["experiments"] as const,
    list: (team: number) => ["experiments", "list", team] as const,
    detail: (id: number) => ["experiments", "detail", id] as const,
  },
  configs: {
    detail: (id: number) => ["configs", "detail", id] as const,
    diff: (a: number, b: number) => ["configs", "diff", a, b] as const,
    /** POST /configs/diff (a read: nothing stored), keyed by its body */
    specDiff: (body: unknown) => ["configs", "spec-diff", body] as const,
  },
  metrics: {
    run: (runId: number, read: MetricsRead) => ["metrics", "run", runId, read] as const,
    compare: (source: CompareSource, read: MetricsRead) => ["metrics", "compare", source, read] as const,
  },
  /** validate_only of a launch or clone: no side effect, so a query keyed by its body */
  launchCheck: (body: unknown) => ["launch-check", body] as const,
  specSchema: ["spec-schema"] as const,
  clusters: (team: number) => ["clusters", team] as const,
  datasets: (team: number) => ["datasets", team] as const,
  preflight: (experiment: number) => ["preflight", experiment] as const,
  preflights: ["preflight"] as const,
  alarms: {
    run: (id: number) => ["alarms", "run", id] as const,
    compares: ["alarms", "compare"] as const,
    compare: (source: CompareSource) => ["alarms", "compare", source] as const,
  },
  sweeps: {
    all: ["sweeps"] as const,
    list: (team: number) => ["sweeps", "list", team] as const,
    detail: (id: number) => ["sweeps", "detail", id] as const,
    /** validate_only of a sweep: no side effect, so a query keyed by its body */
    check: (body: unknown) => ["sweeps", "check", body] as const,
  },
  pools: {
    list: ["pools", "list"] as const,
    detail: (id: number) => ["pools", "detail", id] as const,
  },
  teams: {
    members: (team: number) => ["teams", team, "members"] as const,
    tokens: (team: number) => ["teams", team, "tokens"] as const,
    secrets: (team: number) => ["teams", team, "secrets"] as const,
    quota: (team: number) => ["teams", team, "quota"] as const,
    audit: (team: number) => ["teams", team, "audit"] as const,
  },
};
