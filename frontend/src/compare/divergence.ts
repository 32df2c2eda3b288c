// The divergence statistic of the compare view: do two backends train the same?
//
// d_t = mean reward of A at step t − mean reward of B at step t (steps both have). Over a
// trailing window of W steps, the mean of d and its confidence interval
// mean ± z·sd/√n (sd the sample standard deviation of d in the window). A window
// "diverges" when its interval excludes 0 and |mean| exceeds the tolerance; divergence
// starts at the first of `persist` consecutive diverging windows, so one noisy stretch is
// not called a divergence.

export interface DivergenceOptions {
  window: number;
  z: number;
  tolerance: number;
  persist: number;
}

export const DEFAULT_DIVERGENCE: DivergenceOptions = { window: 20, z: 1.96, tolerance: 0.02, persist: 3 };

export interface Divergence {
  steps: number[];
  diff: (number | null)[];
  mean: (number | null)[];
  lo: (number | null)[];
  hi: (number | null)[];
  /** first step from which the backends diverge, or null */
  divergesFrom: number | null;
  /** largest |bound| of any window's interval: they agree within ± this */
  agreeWithin: number | null;
}

export function divergence(
  steps: readonly number[],
  a: readonly (number | null)[],
  b: readonly (number | null)[],
  options: Partial<DivergenceOptions> = {},
): Divergence {
  const { window, z, tolerance, persist } = { ...DEFAULT_DIVERGENCE, ...options };
  const n = steps.length;
  const diff: (number | null)[] = new Array(n).fill(null);
  const mean: (number | null)[] = new Array(n).fill(null);
  const lo: (number | null)[] = new Array(n).fill(null);
  const hi: (number | null)[] = new Array(n).fill(null);
  const recent: number[] = [];
  let streak = 0;
  let streakStart: number | null = null;
  let divergesFrom: number | null = null;
  let agreeWithin: number | null = null;
  for (let i = 0; i < n; i++) {
    const va = a[i];
    const vb = b[i];
    if (va === null || vb === null || !Number.isFinite(va) || !Number.isFinite(vb)) continue;
    const d = va - vb;
    diff[i] = d;
    recent.push(d);
    if (recent.length > window) recent.shift();
    if (recent.length < Math.min(window, 3)) continue;
    const m = recent.reduce((s, v) => s + v, 0) / recent.length;
    const variance = recent.reduce((s, v) => s + (v - m) ** 2, 0) / (recent.length - 1);
    const half = (z * Math.sqrt(variance)) / Math.sqrt(recent.length);
    mean[i] = m;
    lo[i] = m - half;
    hi[i] = m + half;
    agreeWithin = Math.max(agreeWithin ?? 0, Math.abs(m - half), Math.abs(m + half));
    const diverging = (m - half > 0 || m + half < 0) && Math.abs(m) > tolerance;
    if (diverging) {
      if (streak === 0) streakStart = steps[i];
      streak += 1;
      if (streak >= persist && divergesFrom === null) divergesFrom = streakStart;
    } else {
      streak = 0;
    }
  }
  return { steps: steps.slice(), diff, mean, lo, hi, divergesFrom, agreeWithin };
}

/** One line for people: "torch and vllm agree within ±0.012 reward" or
 * "torch and vllm diverge from step 140". */
export function verdict(nameA: string, nameB: string, d: Divergence): string {
  if (d.divergesFrom !== null) return `${nameA} and ${nameB} diverge from step ${d.divergesFrom}`;
  if (d.agreeWithin === null) return `${nameA} and ${nameB}: not enough common steps yet`;
  return `${nameA} and ${nameB} agree within ±${d.agreeWithin.toPrecision(2)} reward`;
}
