// Friendly names for the shapes of the REST API (platform/paddock/api) and the live stream
// (docs/live-protocol.md). The REST shapes come from the OpenAPI schema, generated into
// schema.gen.ts (scripts/api-types.sh; make test fails when it drifts from the serializers);
// the websocket's messages come from the platform's models the same way (live.gen.ts); what
// is written by hand here is what neither can say: the session endpoints (not DRF) and the
// inside of JSON fields (a spec, sample items).
import type { components as LiveComponents } from "./live.gen";
import type { components, operations } from "./schema.gen";

type Schemas = components["schemas"];
/** A response body: DRF writes every field of a model serializer, those with defaults too,
 * so the fields the schema marks optional (for requests) are always in an answer. */
type Sent<T> = Required<T>;

export type Role = Schemas["RoleEnum"];
// The unions come from the OpenAPI schema; the lists of names from workers/names.py
// (names.gen.ts), where the server's choices come from too.
export type Backend = Schemas["BackendEnum"];
export { BACKENDS, EPISODE_METRICS, RUN_STATES, TERMINAL_RUN_STATES } from "./names.gen";
export type { EpisodeMetric } from "./names.gen";

export type RunState = Schemas["StateEnum"];
export type DesiredState = Schemas["DesiredStateEnum"];
export type RunAction = Live["ControlMessage"]["action"];

export interface User { id: number; username: string; email?: string; is_staff?: boolean }
export interface TeamRef { id: number; name: string; slug: string; role: Role }
/** /api/v1/session/me (core/session_views.py, outside the OpenAPI schema) */
export interface Session { user: User; teams: TeamRef[] }

export type UserBrief = Schemas["UserBrief"];
export type Cursor = Schemas["Cursor"];

export type Experiment = Sent<Schemas["Experiment"]>;

export type Run = Sent<Schemas["Run"]>;
/** One run with the pool that hosts it (docs/pools.md), as its team may see it. */
export type RunDetail = Sent<Schemas["RunDetail"]>;
export type RunPool = Schemas["RunPool"];
/** A pool as the caller sees it: its own teams' member runs only, and a count of all. */
export type Pool = Schemas["Pool"];
export type PoolMember = Schemas["PoolMember"];

export interface RunFilters {
  state?: string;
  backend?: string;
  tag?: string;
  creator?: string;
  experiment?: number | string;
  search?: string;
}

/** The query of GET /runs/{id}/metrics and of GET /metrics. */
export type RunMetricsQuery = NonNullable<operations["runs_metrics_retrieve"]["parameters"]["query"]>;
export type MultiMetricsQuery = operations["metrics_retrieve"]["parameters"]["query"];
export type XAxis = NonNullable<RunMetricsQuery["x"]>;
export type MetricsSample = NonNullable<RunMetricsQuery["sample"]>;

/** GET /runs/{id}/metrics: per key, x (step, time or tokens as asked), y and the step of
 * each kept point; downsampled on the server (min/max per bucket). */
export type MetricSeriesBody = Schemas["Series"];
export type RunMetricsBody = Schemas["RunMetrics"];
export type MultiMetricsBody = Schemas["MultiMetrics"];

export type Checkpoint = Sent<Schemas["Checkpoint"]>;

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
  /** a multi-turn episode, turn by turn (workers/envs/metrics.py `episode_turns`); absent
   * for a one-turn sample. `completion` is then the last model turn's text. */
  turns?: EpisodeTurn[];
}

/** One entry of an episode: a model turn, or one message of the environment's answer
 * (`tool`, `user`, `env`). An answer of several messages carries its token count on its
 * first message (the others have 0); a failed episode ends with an `env` note that has
 * none. */
export interface EpisodeTurn {
  role: string;
  text: string;
  /** tokens it put in the episode; absent on a failure note */
  tokens?: number;
  /** out of the loss: every environment token, and a failed episode's model turns */
  masked: boolean;
  /** a model turn's oldest adapter version, and every version its tokens came from (an
   * update in mid-turn under weight_update: continue) */
  adapter_version?: number;
  adapter_versions?: number[];
  /** a tool message's tool */
  name?: string | null;
}

/** JSON fields the schema sees as `unknown`: their shapes are the model's. */
export type Cluster = Omit<Sent<Schemas["Cluster"]>, "backends" | "capacity" | "labels"> & {
  backends: Backend[];
  capacity: Record<string, number>;
  labels: Record<string, string>;
};

export type ConfigVersion = Omit<Sent<Schemas["ConfigVersion"]>, "spec"> & { spec: Record<string, unknown> };

/** GET /configs/diff?a=&b=: the dotted paths whose values differ (a side that lacks the
 * key has null there and `only_in` names the other). */
export type ConfigDiff = Schemas["Diff"];
export type ConfigChange = Schemas["Change"];
/** POST /configs/diff: each side a stored version (`a`, `b`) or a spec not stored yet
 * (`a_spec`, `b_spec`, validated and normalized as a launch's); a spec's side's id is null */
export type SpecDiffRequest = Omit<Schemas["SpecDiffRequest"], "a_spec" | "b_spec"> & {
  a_spec?: Record<string, unknown>; b_spec?: Record<string, unknown>;
};
export type SpecDiff = Schemas["SpecDiffAnswer"];

/** POST /experiments */
export type LaunchRequest = Schemas["LaunchRequest"];

/** POST /experiments/{id}/clone: the source's config with dotted-path edits */
export type CloneRequest = Schemas["CloneRequest"];

export interface SpecError { field: string; message: string; code?: string }

/** GET /datasets: the team's uploads, `rows` each */
export type Dataset = Sent<Schemas["Dataset"]>;
/** POST /spec/import: a verl or NeMo-RL config, pasted */
export type ConfigImportRequest = Schemas["ConfigImportRequest"];
/** its answer: the spec (only the keys the import set) and each key left out, with the
 * file that set it and why */
export type SpecImport = Omit<Sent<Schemas["SpecImport"]>, "spec"> & { spec: Record<string, unknown> };
export type UnmappedKey = Schemas["UnmappedKey"];

/** validate_only answers 200 with a report; a real launch 201 with what it created (the
 * schema describes that body only as an object). */
export type LaunchResponse =
  | (Omit<Schemas["ValidationReport"], "errors"> & { errors: SpecError[] })
  | { experiment: Experiment; runs: Run[] };

/** A sweep (docs/sweeps.md); `params` is the search space as the server stored it. */
export type SweepParam = { values: (number | string | boolean | null)[] }
  | { min: number; max: number; log: boolean; int: boolean };
export type SweepStopping = { rule: "median"; min_steps: number; min_members: number }
  | { rule: "threshold"; min_steps: number; threshold: number };
export type Sweep = Omit<Sent<Schemas["Sweep"]>, "params" | "stopping"> & {
  params: Record<string, SweepParam>; stopping: SweepStopping | null;
};
export type SweepMember = Omit<Schemas["SweepMember"], "settings"> & {
  settings: Record<string, number | string | boolean | null>;
};
export type SweepDetail = Sweep & { members: SweepMember[] };
export type SweepState = Schemas["SweepStateEnum"];
export type SweepMemberState = Schemas["SweepMemberStateEnum"];
export type SweepCreateRequest = Schemas["SweepCreateRequest"];
export type SweepValidation = Omit<Schemas["SweepValidation"], "errors"> & { errors: (SpecError & { member?: number })[] };

export type Member = Sent<Schemas["Member"]>;

export type ApiTokenRow = Sent<Schemas["Token"]>;

/** the secret is in `token`, in this one answer only */
export type CreatedToken = Sent<Schemas["TokenCreated"]>;

export type Quota = Sent<Schemas["Quota"]>;

/** a team secret as the API shows it: its name and a mask, never its value */
export type TeamSecret = Sent<Schemas["Secret"]>;

export type AuditEvent = Omit<Sent<Schemas["AuditEvent"]>, "data"> & { data: Record<string, unknown> };

/** GET /runs/{id}/events: `time` is ISO 8601 here (Unix seconds on the websocket) */
export type RunEventRow = Sent<Schemas["RunEvent"]>;
export type RunEventPage = Omit<Schemas["RunEventPage"], "results"> & { results: RunEventRow[] };

/** GET /runs/{id}/samples: one set per step, newest step first */
export type SampleSetRow = Omit<Sent<Schemas["SampleSet"]>, "items"> & { items: Sample[] };
export type SampleSetPage = Omit<Schemas["SampleSetPage"], "results"> & { results: SampleSetRow[] };

// ---- live stream -------------------------------------------------------------------------
// The websocket's messages are generated from the platform's models (workers/live_messages.py
// → live.gen.ts, by scripts/api-types.sh); only the inside of a sample set is said here.

type Live = LiveComponents["schemas"];
type WithSamples<T> = Omit<T, "items"> & { items: Sample[] };

/** A run's state and progress in a snapshot. */
export type LiveRun = Live["RunFields"];
/** A stored log line or status change, as a snapshot or a `log` message carries it. */
export type LogRow = Live["LogRow"];
export type StepSamples = WithSamples<Live["StepSamples"]>;

/** What the server sends (docs/live-protocol.md). */
export type LiveMessage =
  | (Omit<Live["SnapshotMessage"], "samples"> & { samples: StepSamples[] })
  | Live["MetricsMessage"]
  | Live["StateMessage"]
  | Live["LogMessage"]
  | WithSamples<Live["SamplesMessage"]>
  | Live["CheckpointMessage"]
  | Live["AlarmsMessage"]
  | Live["ErrorMessage"];

/** One alarm of a run (workers/alarms.py, docs/alarms.md): the live stream's row, which
 * GET /runs/{id}/alarms and GET /alarms answer with too. */
export type AlarmRow = Live["AlarmRow"];
export type AlarmName = AlarmRow["name"];
/** GET /experiments/{id}/preflight: its state and each pre-flight run's verdict */
export type ExperimentPreflight = Schemas["ExperimentPreflight"];
export type PreflightVerdict = NonNullable<Schemas["PreflightRun"]["verdict"]>;

/** GET /runs/{id}/alarms */
export type RunAlarms = Schemas["RunAlarms"];
/** GET /alarms?runs= | ?experiment= */
export type ComparedAlarms = Schemas["ComparedAlarms"];

/** What a viewer sends: a control, naming the run on an experiment's stream. */
export type ControlMessage = Live["ControlMessage"];
