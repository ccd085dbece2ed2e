// The guards made in this worker, in creation order: gateway.new adds them and
// the status pages list them. A module of its own, so that the public gateway
// module never hands out the list a status page reads.

import type * as guard from "./guard";

const listed: guard.Listed[] = [];

/** Every guard made so far (to read). */
export function all(): readonly guard.Listed[] {
  return listed;
}

/** How many guards there are: a guard with no name is named after its mode and this count. */
export function count(): number {
  return listed.length;
}

/** Is name taken by a guard already? */
export function taken(name: string): boolean {
  for (const i of $range(1, listed.length)) {
    if (listed[i - 1]!.name === name) return true;
  }
  return false;
}

export function add(g: guard.Listed): void {
  listed.push(g);
}
