// A multi-turn sample as the inspector draws it: the episode's entries (workers/envs/
// metrics.py `episode_turns`) segmented into model turns, the environment's answers (the
// messages one answer holds, which share its token count) and a failure note; each segment
// with its place in the episode's tokens, so that the masked spans (what got no gradient)
// can be named. Pure: tested without rendering.
import type { EpisodeTurn, Sample } from "../api/types";

export interface ModelSegment {
  kind: "model";
  /** 1-based: the model's nth turn */
  turn: number;
  text: string;
  /** token offsets in the episode after the prompt, [from, to) */
  from: number;
  to: number;
  /** a failed episode's model turns are masked too */
  masked: boolean;
  /** the adapter versions its tokens came from, oldest first; empty when not recorded */
  versions: number[];
}

export interface AnswerSegment {
  kind: "answer";
  /** the environment's messages of one answer: a tool result each, a user message… */
  messages: { role: string; name: string | null; text: string }[];
  from: number;
  to: number;
  masked: true;
}

export interface NoteSegment { kind: "note"; text: string }

export type Segment = ModelSegment | AnswerSegment | NoteSegment;

export interface EpisodeView {
  segments: Segment[];
  modelTurns: number;
  /** tokens after the prompt: trained on (model, unmasked) and masked out of the loss */
  trained: number;
  masked: number;
  /** the masked token ranges [from, to), adjacent ones merged */
  maskedSpans: [number, number][];
  /** an environment failed the episode (its note says why); nothing of it was trained on */
  failed: boolean;
}

/** The episode of a sample, or null for a one-turn sample (drawn as before). */
export function episodeView(sample: Pick<Sample, "turns">): EpisodeView | null {
  const turns = sample.turns;
  if (!turns?.length) return null;
  return tally(segmentTurns(turns));
}

/** Model turns as they are; consecutive environment messages as one answer (the answer's
 * token count rides on its first message); an entry without a token count (the failure
 * note) on its own. */
export function segmentTurns(turns: readonly EpisodeTurn[]): Segment[] {
  const out: Segment[] = [];
  let at = 0;
  let modelTurns = 0;
  for (const t of turns) {
    if (t.tokens === undefined || t.tokens === null) {
      out.push({ kind: "note", text: t.text });
      continue;
    }
    const from = at;
    at += Math.max(0, t.tokens);
    if (t.role === "model") {
      const versions = t.adapter_versions?.length ? [...t.adapter_versions]
        : t.adapter_version !== undefined && t.adapter_version >= 0 ? [t.adapter_version] : [];
      out.push({ kind: "model", turn: ++modelTurns, text: t.text, from, to: at, masked: t.masked,
        versions: versions.filter((v) => v >= 0).sort((a, b) => a - b) });
      continue;
    }
    const message = { role: t.role || "env", name: t.name ?? null, text: t.text };
    const last = out[out.length - 1];
    if (last?.kind === "answer") {
      last.messages.push(message);
      last.to = at;
    } else {
      out.push({ kind: "answer", messages: [message], from, to: at, masked: true });
    }
  }
  return out;
}

function tally(segments: Segment[]): EpisodeView {
  let trained = 0;
  let masked = 0;
  const spans: [number, number][] = [];
  for (const s of segments) {
    if (s.kind === "note") continue;
    const n = s.to - s.from;
    if (!s.masked) { trained += n; continue; }
    masked += n;
    if (n === 0) continue;
    const last = spans[spans.length - 1];
    if (last && last[1] === s.from) last[1] = s.to;
    else spans.push([s.from, s.to]);
  }
  return {
    segments,
    modelTurns: segments.filter((s) => s.kind === "model").length,
    trained, masked, maskedSpans: spans,
    failed: segments.some((s) => s.kind === "note"),
  };
}

/** A model turn's adapter: "v3", or "v3→v4" when an update landed in mid-turn; "—" when
 * not recorded. */
export function versionLabel(versions: readonly number[]): string {
  if (!versions.length) return "—";
  return versions.length === 1 ? `v${versions[0]}` : `v${versions[0]}→v${versions[versions.length - 1]}`;
}

/** The tokens of [from, to) in words: "tokens 12–39" (inclusive), "no tokens". */
export function spanLabel(from: number, to: number): string {
  if (to <= from) return "no tokens";
  return to - from === 1 ? `token ${from}` : `tokens ${from}–${to - 1}`;
}

/** What the inspector's search reads of a sample: its prompt and completion, and every
 * turn of its episode (a tool's output is where the answer often is). */
export function searchableText(sample: Pick<Sample, "prompt" | "completion" | "turns">): string {
  return [sample.prompt, sample.completion, ...(sample.turns ?? []).map((t) => t.text)].join("\n");
}
