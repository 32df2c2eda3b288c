// Hooks rendered against a real QueryClient (one per test, as the app has one).
import { QueryClientProvider, type QueryClient } from "@tanstack/react-query";
import { renderHook } from "@testing-library/react";
import type { ReactNode } from "react";
import { newQueryClient } from "../api/queryClient";

export function renderWithClient<P, R>(hook: (props: P) => R, options: { client?: QueryClient; initialProps?: P } = {}) {
  const client = options.client ?? newQueryClient();
  const wrapper = ({ children }: { children: ReactNode }) => <QueryClientProvider client={client}>{children}</QueryClientProvider>;
  return { client, ...renderHook(hook, { wrapper, initialProps: options.initialProps }) };
}
