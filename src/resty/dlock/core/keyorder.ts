// The one order in which every caller of acquire_all takes keys it cannot take
// in one script call (Cluster keys of several slots, and any set while it waits):
// sorted by Redis key, so no two callers can each hold what the other waits for.

import * as scripts from "../redis/scripts";

const table_sort = table.sort;
const hashed = scripts.hashed;

function byRkey(this: void, a: [string, number], b: [string, number]): boolean {
  return a[0] < b[0];
}

/** The keys' indexes sorted by Redis key. */
function sorted(rkeys: string[]): number[] {
  const pairsOf: [string, number][] = [];
  for (const i of $range(1, rkeys.length)) pairsOf[i - 1] = [rkeys[i - 1]!, i];
  table_sort(pairsOf, byRkey);
  const order: number[] = [];
  for (const i of $range(1, pairsOf.length)) order[i - 1] = pairsOf[i - 1]![1];
  return order;
}

/** Cluster keys of more than one slot: the order to take them in; nil when one call can take them all. */
export function of(slotted: boolean, rkeys: string[]): number[] | undefined {
  if (!slotted) return undefined;
  const h = hashed(rkeys[0]!);
  for (const i of $range(2, rkeys.length)) {
    if (hashed(rkeys[i - 1]!) !== h) return sorted(rkeys);
  }
  return undefined;
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { sorted };
