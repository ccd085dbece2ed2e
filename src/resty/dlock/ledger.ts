// Local bookkeeping of the leases this nginx instance holds, in a lua_shared_dict
// so every worker (and the status endpoint) sees them. One record per lock key,
// one per permit for semaphores (several holders share a key):
//   "l:" .. redis key [.. " " .. token]  ->  "<serial> <pid> <expires_ms> <token> <key>"
// The record expires with the lease, so a crashed worker leaves nothing behind.
// The serial tells two leases of the same worker apart: with per-worker tokens a
// stale lease carries the same token as its successor, and only the serial shows
// that it must not release or extend it.

const RECORD = "l:";
const SERIAL = "serial";

export interface HeldLease {
  key: string;
  token: string;
  pid: number;
  /** Epoch seconds (ngx.now() scale) when the lease expires unless extended. */
  expires_at: number;
  /** Milliseconds left. */
  ttl: number;
}

/** The dict key of a lease's record. */
export function recordKey(rkey: string, token: string, shared: boolean): string {
  return shared ? RECORD + rkey + " " + token : RECORD + rkey;
}

function encode(serial: number, token: string, key: string, ttl: number): string {
  const expires = math.floor(ngx.now() * 1000) + ttl;
  return serial + " " + ngx.worker.pid() + " " + expires + " " + token + " " + key;
}

/** Record a new lease; returns its serial (0 when the dict could not take it). */
export function record(dict: NgxSharedDict, rec: string, token: string, key: string, ttl: number): number {
  const [serial, ierr] = dict.incr(SERIAL, 1, 0);
  if (serial === undefined) {
    ngx.log(ngx.WARN, "dlock: shared dict: cannot count leases: ", ierr);
    return 0;
  }
  const [ok, err] = dict.safe_set(rec, encode(serial, token, key, ttl), ttl / 1000);
  if (!ok) {
    ngx.log(ngx.WARN, "dlock: shared dict: cannot record lease of ", key, ": ", err);
  }
  return serial;
}

function serialOf(dict: NgxSharedDict, rec: string): number | undefined {
  const [v] = dict.get(rec);
  if (type(v) !== "string") {
    return undefined;
  }
  const [s] = string.match(v as string, "^(%d+) ");
  if (s === undefined) {
    return undefined;
  }
  return tonumber(s);
}

/** The pid and expiry (epoch ms) of the holder recorded under `rec`, or nil when none in this nginx. */
export function holder(dict: NgxSharedDict, rec: string): LuaMultiReturn<[number | undefined, number]> {
  const [v] = dict.get(rec);
  if (type(v) !== "string") {
    return $multi(undefined, 0);
  }
  const [pid, expires] = string.match(v as string, "^%d+ (%d+) (%d+) ");
  if (pid === undefined) {
    return $multi(undefined, 0);
  }
  return $multi(tonumber(pid), tonumber(expires) ?? 0);
}

/** True when this nginx records a different, newer lease on the same key. */
export function superseded(dict: NgxSharedDict, rec: string, serial: number): boolean {
  const current = serialOf(dict, rec);
  return current !== undefined && current !== serial;
}

/** Move the record's expiry after a successful extend. */
export function renew(dict: NgxSharedDict, rec: string, serial: number, token: string, key: string, ttl: number): void {
  if (serialOf(dict, rec) === serial) {
    dict.safe_set(rec, encode(serial, token, key, ttl), ttl / 1000);
  }
}

/**
 * Drop the record if it is still this lease's; false when a newer lease of this
 * nginx owns the key (then this one must not touch it). Called before the Redis release:
 * while we still hold the key in Redis nobody can write a newer record, so the
 * get-then-delete cannot remove a successor's record.
 */
export function forget(dict: NgxSharedDict, rec: string, serial: number): boolean {
  const current = serialOf(dict, rec);
  if (current === serial) {
    dict.delete(rec);
  }
  return current === undefined || current === serial;
}

/** Every lease recorded now. Walks the dict's keys: meant for status pages, not hot paths. */
export function held(dict: NgxSharedDict): HeldLease[] {
  const out: HeldLease[] = [];
  const nowMs = ngx.now() * 1000;
  const keys = dict.get_keys(0);
  for (const i of $range(1, keys.length())) {
    const k = keys.get(i);
    if (string.sub(k, 1, 2) === RECORD) {
      const [v] = dict.get(k);
      if (type(v) === "string") {
        const [, pid, expires, token, key] = string.match(v as string, "^(%d+) (%d+) (%d+) (%S+) (.*)$");
        if (key !== undefined) {
          const exp = tonumber(expires) ?? 0;
          out.push({ key, token: token!, pid: tonumber(pid) ?? 0, expires_at: exp / 1000, ttl: math.max(0, exp - nowMs) });
        }
      }
    }
  }
  return out;
}

/** Dict key counting leases whose record the dict could not take (it was full). */
export const UNRECORDED = "c:ledger:unrecorded";

/** How many leases this nginx could not record since it started (the dict was full). */
export function unrecorded(dict: NgxSharedDict): number {
  const [v] = dict.get(UNRECORDED);
  return type(v) === "number" ? (v as number) : 0;
}
