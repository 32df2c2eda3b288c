// Colours that stay apart for the colour-blind (Okabe–Ito), one per backend.
import type { Backend } from "../api/types";

export const BACKEND_COLOR: Record<Backend, string> = {
  torch: "#d55e00",
  vllm: "#0072b2",
  trtllm: "#009e73",
};

const CYCLE = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#7a5195", "#444444"];

export function colorAt(i: number): string {
  return CYCLE[i % CYCLE.length];
}

/** `#rrggbb` with an alpha, for shadows and bands. */
export function withAlpha(hex: string, alpha: number): string {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}
