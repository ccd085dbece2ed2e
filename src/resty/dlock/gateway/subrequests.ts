// Leases taken in subrequests (a guard in rewrite_by_lua of a location reached
// by ngx.location.capture or auth_request). nginx runs no log phase for a
// subrequest: such leases end with their main request's log(), which finds
// them by the connection the two share (inflight.ts); without any log() the
// keeper ends them once the main request is gone.

/** Per connection (its address), the ids of its subrequests holding leases. */
const byConnection = new LuaTable<number, number[]>();
/** Connections in byConnection: nothing to look up at a log() while none. */
let linked = 0;

/** Subrequest rid, of the main request on connection conn, holds leases. */
export function link(conn: number, rid: number): void {
  let list = byConnection.get(conn);
  if (list === undefined) {
    list = [];
    byConnection.set(conn, list);
    linked++;
  }
  list.push(rid);
}

/** Subrequest rid's leases ended. */
export function unlink(conn: number, rid: number): void {
  const list = byConnection.get(conn);
  if (list === undefined) return;
  const n = list.length;
  for (const i of $range(1, n)) {
    if (list[i - 1] === rid) {
      list[i - 1] = list[n - 1]!;
      list[n - 1] = undefined as unknown as number;
      break;
    }
  }
  if (list.length === 0) {
    byConnection.delete(conn);
    linked--;
  }
}

/** Does any subrequest hold leases? (Until one does, a log() looks up nothing.) */
export function any(): boolean {
  return linked > 0;
}

/**
 * The subrequests of connection conn that hold leases (nil: none). unlink()
 * moves the last one into the place of the one it takes out: walk it from
 * the end.
 */
export function of(conn: number): number[] | undefined {
  return byConnection.get(conn);
}
