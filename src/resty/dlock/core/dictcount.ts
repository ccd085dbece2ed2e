// Counters and marks in a shared dict that never push a lease's record out.
// incr with an init value on a key the dict does not have, and add, make room
// by evicting the least recently used keys when the dict is full: records of
// held leases among them, which the ledger promises a full dict never loses
// (it only fails to record new ones). A counter or mark with no room is
// dropped instead: a count missed, a sweep skipped.

/** dict[k] += n: the new value, or nil when k is new and the dict has no room for it. */
export function count(dict: NgxSharedDict, k: string, n: number): number | undefined {
  // An existing key: incr takes no memory.
  const [v] = dict.incr(k, n);
  if (v !== undefined) return v;
  if (dict.safe_add(k, n)[0]) return n;
  // Added by another worker in between (or no room: nil again).
  const [again] = dict.incr(k, n);
  return again;
}

/** add(k, v, ttl) only into free memory: true when k was not there and now is. */
export function mark(dict: NgxSharedDict, k: string, v: NgxDictValue, ttl: number): boolean {
  const [ok] = dict.safe_add(k, v, ttl);
  return ok === true;
}
