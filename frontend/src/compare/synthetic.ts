// Synthetic reward curves for the divergence tests: a learning curve plus the noise of a
// real run (each step's batch mean, and a slow AR(1) wander of the policy), from a seeded
// generator so every test sees the same numbers.

/** mulberry32: a small seeded uniform generator in [0, 1). */
export function uniform(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Standard normal draws (Box–Muller) from a seeded generator. */
export function normal(seed: number): () => number {
  const u = uniform(seed);
  return () => Math.sqrt(-2 * Math.log(1 - u())) * Math.cos(2 * Math.PI * u());
}

export interface Noise {
  /** sd of each step's batch-mean reward */
  perStep: number;
  /** sd of the slow wander's innovations, and its autocorrelation */
  wander: number;
  rho: number;
}

export const RUN_NOISE: Noise = { perStep: 0.06, wander: 0.015, rho: 0.9 };

/** One run: `curve(step)` plus noise, the seed picking the draws. */
export function run(steps: readonly number[], curve: (step: number) => number, seed: number,
  noise: Noise = RUN_NOISE): number[] {
  const z = normal(seed);
  let w = 0;
  return steps.map((s) => {
    w = noise.rho * w + noise.wander * z();
    return curve(s) + w + noise.perStep * z();
  });
}

/** A learning curve from `from` to `to`, rising around `mid` over about `width` steps. */
export const learning = (from: number, to: number, mid: number, width = 15) =>
  (step: number) => from + (to - from) / (1 + Math.exp(-(step - mid) / (width / 4)));
