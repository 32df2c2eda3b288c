// React.lazy, except that a component whose code has already arrived renders at once.
//
// A lazy component suspends on its first render even when its chunk was fetched long
// before, and React 19 then holds the content that replaces a Suspense fallback back for up
// to 300 ms (it batches reveals). The pages and charts start loading their chunks early
// (at boot, beside the session check), so by the time they render the code is usually
// there: rendering it directly skips both the fallback and that wait.
import { createElement, lazy, type ComponentType } from "react";

export function preloadable<P extends object>(load: () => Promise<{ default: ComponentType<P> }>): {
  Component: ComponentType<P>;
  preload: () => Promise<unknown>;
} {
  let loaded: ComponentType<P> | null = null;
  let pending: Promise<{ default: ComponentType<P> }> | null = null;
  const preload = () => {
    pending ??= load().then((module) => { loaded = module.default; return module; });
    return pending;
  };
  const Lazy = lazy(preload);
  function Component(props: P) {
    return loaded ? createElement(loaded, props) : createElement(Lazy, props);
  }
  return { Component, preload };
}
