// Requests a guard has seen, found again when an internal redirect brings
// them back (error_page, ngx.exec, try_files): with a fresh ngx.ctx, at the
// same address. An anchor (core/request.ts) tells whether the request at an
// address is still the one seen; those that are gone are swept once SWEEP
// are kept.

import * as request from "../core/request";

const request_alive = request.alive;
const lua_pairs = pairs;

/** Entries kept before the gone ones are swept. */
const SWEEP = 1000;

export interface Seen<A extends request.Anchor> {
  readonly byId: LuaTable<number, A>;
  count: number;
}

export function create<A extends request.Anchor>(): Seen<A> {
  return { byId: new LuaTable<number, A>(), count: 0 };
}

/** The anchor kept for request id when that request is still running, else nil. */
export function find<A extends request.Anchor>(s: Seen<A>, id: number): A | undefined {
  const a = s.byId.get(id);
  if (a === undefined || !request_alive(a)) return undefined;
  return a;
}

/** Keep a, the current request's anchor (not one nginx cannot watch: nothing would tell it gone). */
export function put<A extends request.Anchor>(s: Seen<A>, a: A): void {
  if (a.ref < 0) return;
  const byId = s.byId;
  if (s.count >= SWEEP) {
    for (const [k, v] of lua_pairs(byId)) {
      if (!request_alive(v)) {
        byId.set(k, undefined as unknown as A);
        s.count--;
      }
    }
  }
  if (byId.get(a.id) === undefined) s.count++;
  byId.set(a.id, a);
}
