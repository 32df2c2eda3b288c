// Shapes of the REST API (platform/paddock/api) and the live stream (docs/live-protocol.md).
// Optional fields are ones the UI can do without.

export type Role = "viewer" | "member" | "admin" | "owner";
export type Backend = "torch" | "vllm" | "trtllm";
export const BACKENDS: Backend[] = ["torch", "vllm", "trtllm"];

export type RunState =
  | "queued" | "dispatching" | "starting" | "running" | "pausing" | "paused" | "resuming"
  | "succeeded" | "aborting" | "aborted" | "failed";
export type DesiredState = "running" | "paused" | "aborted";
export type RunAction = "pause" | "resume" | "abort";

export interface User { id: number; username: string; email?: string; is_staff?: boolean }
export interface TeamRef { id: number; name: string; slug: string; role: Role }
export interface Session { user: User; teams: TeamRef[] }

export interface UserBrief { id: number; username: string }

export interface Experiment {
  id: number;
  team: number;
  team_slug?: string;
  name: string;
  description?: string;
  tags: string[];
  config: number;
  cloned_from?: number | null;
  created_by?: UserBrief | null;
  created_at: string;
  run_count?: number;
  active_run_count?: number;
}

export interface Run {
  id: number;
  experiment: number;
  experiment_name?: string;
  team: number;
  backend: Backend;
  seed: number;
  state: RunState;
  desired_state: DesiredState;
  step: number;
  total_steps: number;
  tags?: string[];
  config?: number;
  cluster?: number | null;
  cluster_name?: string | null;
  gpus?: number;
  attempts?: number;
  max_attempts?: number;
  dispatch_count?: number;
  cursor?: Cursor;
  created_by?: UserBrief | null;
  created_at: string;
  started_at?: string | null;
  finished_at?: string | null;
  updated_at?: string;
  queued_reason?: string;
  error?: string;
  /** the last value of a few headline metrics, e.g. {"reward/mean": 0.41} (from the
   * stream; the REST row does not carry them yet) */
  latest?: Record<string, number>;
}

export interface RunFilters {
  state?: string;
  backend?: string;
  tag?: string;
  creator?: string;
  experiment?: number | string;
  search?: string;
}

export type XAxis = "step" | "time" | "tokens";

/** GET /runs/{id}/metrics: per key, x (step, time or tokens as asked), y and the step of
 * each kept point; downsampled on the server (min/max per bucket). */
export interface MetricSeriesBody {
  key: string;
  x: number[];
  y: (number | null)[];
  step: number[];
  count: number;
  downsampled: boolean;
}
export interface RunMetricsBody { run: number; x: XAxis; series: MetricSeriesBody[] }
export interface MultiMetricsBody { x: XAxis; runs: RunMetricsBody[] }

export interface Checkpoint {
  id: number;
  run?: number;
  step: number;
  adapter_version: number;
  uri: string;
  size_bytes: number | null;
  dispatch?: number;
  created_at: string;
}

export interface Sample {
  prompt: string;
  completion: string;
  reward: number;
  advantage: number;
  adapter_version?: number;
  /** each reward term's unweighted score, by its key (label or name) */
  terms?: Record<string, number>;
  /** what each term saw: extracted answer, parsed gold, token count... */
  details?: Record<string, Record<string, unknown>>;
}

export interface Cluster {
  id: number;
  name: string;
  backends: Backend[];
  healthy: boolean;
  capacity?: Record<string, number>;
  labels?: Record<string, string>;
  team?: number | null;
  dashboard_url?: string;
  last_seen_at?: string | null;
}

export interface ConfigVersion {
  id: number;
  team?: number;
  spec: Record<string, unknown>;
  hash: string;
  parent?: number | null;
  created_at?: string;
}

interface LaunchCommon {
  name: string;
  description?: string;
  tags?: string[];
  backends: Backend[];
  seeds: number;
  cluster?: number | null;
  validate_only?: boolean;
}

/** POST /experiments */
export interface LaunchRequest extends LaunchCommon {
  team: number;
  spec: Record<string, unknown>;
}

/** POST /experiments/{id}/clone: the source's config with dotted-path edits */
export interface CloneRequest extends LaunchCommon {
  edits: Record<string, unknown>;
  config?: number;
}

export interface SpecError { field: string; message: string; code?: string }

/** validate_only answers 200 with a report; a real launch 201 with what it created. */
export type LaunchResponse =
  | { valid: boolean; errors: SpecError[]; runs: { backend: Backend; seed: number; gpus: number }[] }
  | { experiment: Experiment; runs: Run[] };

export interface Member {
  user: UserBrief;
  role: Role;
  created_at?: string;
}

export interface ApiTokenRow {
  id: number;
  name: string;
  prefix: string;
  user?: UserBrief;
  created_at: string;
  expires_at?: string | null;
  revoked_at?: string | null;
  last_used_at?: string | null;
}

/** the secret is in `token`, in this one answer only */
export interface CreatedToken extends ApiTokenRow { token: string }

export interface Quota {
  max_concurrent_runs: number;
  max_gpus: number;
  max_queued_runs: number;
  active_runs?: number;
  running_runs?: number;
  gpus_in_use?: number;
  updated_at?: string;
}

export interface AuditEvent {
  id: number;
  actor?: UserBrief | null;
  action: string;
  target_type: string;
  target_id: string;
  data?: Record<string, unknown>;
  ip?: string | null;
  user_agent?: string;
  created_at: string;
}

// ---- live stream -------------------------------------------------------------------------

export interface Cursor { dispatch: number; seq: number }

export interface LiveRun {
  state: RunState; desired_state: DesiredState; step: number; total_steps: number;
  error?: string; queued_reason?: string;
}

export interface LogRow { id?: number; time: number; level: string; message: string; kind?: "log" | "status" }

/** GET /runs/{id}/events: `time` is ISO 8601 here (Unix seconds on the websocket) */
export interface RunEventRow { id: number; dispatch?: number; kind: "log" | "status"; level: string; message: string; time: string }
export interface RunEventPage { results: RunEventRow[]; last_id: number; next_before: number | null }

/** GET /runs/{id}/samples: one set per step, newest step first */
export interface SampleSetRow { id?: number; step: number; dispatch?: number; created_at?: string; items: Sample[] }
export interface SampleSetPage { results: SampleSetRow[]; next_before_step: number | null }

export type LiveMessage =
  | { type: "snapshot"; run_id: number; cursor: Cursor; run: LiveRun; latest: Record<string, number>;
      points: Record<string, [number, number, number][]>; logs?: LogRow[];
      samples?: { step: number; items: Sample[] }[] }
  | { type: "metrics"; run_id: number; cursor: Cursor;
      steps: { step: number; time: number; values: Record<string, number> }[] }
  | { type: "state"; run_id: number; cursor: Cursor; state: RunState; desired_state: DesiredState;
      detail?: string; step?: number; total_steps?: number }
  | ({ type: "log"; run_id: number; cursor: Cursor } & LogRow)
  | { type: "checkpoint"; run_id: number; cursor: Cursor; step: number; uri?: string; adapter_version?: number }
  | { type: "samples"; run_id: number; cursor: Cursor; step: number; items: Sample[] }
  | { type: "error"; run_id?: number; code: string; message: string };
