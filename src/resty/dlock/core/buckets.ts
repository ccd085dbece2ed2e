// The buckets of the lease metrics' histograms (core/meter.ts): their bounds,
// and the bucket a number of seconds falls in.

/** Upper bounds (s) of the acquire-wait buckets; the last bucket is +Inf. */
export const WAIT_BOUNDS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5];
/** Upper bounds (s) of the hold-time buckets; the last bucket is +Inf. */
export const HOLD_BOUNDS = [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300];

// Bucket indexes by comparisons, not a loop over the bounds: a loop would keep
// the acquire path out of LuaJIT's root trace (see check.nkeys).
export function wait(s: number): number {
  if (s <= 0.05) {
    if (s <= 0.005) return s <= 0.001 ? 1 : 2;
    if (s <= 0.01) return 3;
    return s <= 0.025 ? 4 : 5;
  }
  if (s <= 0.5) {
    if (s <= 0.1) return 6;
    return s <= 0.25 ? 7 : 8;
  }
  if (s <= 1) return 9;
  return s <= 5 ? 10 : 11;
}

export function hold(s: number): number {
  if (s <= 1) {
    if (s <= 0.05) return s <= 0.01 ? 1 : 2;
    if (s <= 0.1) return 3;
    return s <= 0.5 ? 4 : 5;
  }
  if (s <= 30) {
    if (s <= 5) return 6;
    return s <= 10 ? 7 : 8;
  }
  return s <= 60 ? 9 : s <= 300 ? 10 : 11;
}
