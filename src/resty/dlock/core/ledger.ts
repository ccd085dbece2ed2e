// Local bookkeeping of the leases this nginx instance holds, in a lua_shared_dict
// so every worker (and the status endpoint) sees them. One record per lock key,
// one per permit for semaphores (several holders share a key):
//   "l:" .. keyspace .. redis key [.. " " .. token]  ->  "<pid> <expires_ms> <token> <key>"
// (keyspace: RedisConf.keyspace, "<8 hex>|": one dict may keep the leases of
// several Redis servers or dbs whose keys have the same names)
// The record expires with the lease, so a crashed worker leaves nothing behind.
// Records only serve held(), status pages and local waiting; exclusion never
// depends on them (the token in Redis decides), so a full dict loses records,
// not safety.

import * as clock from "./clock";
import * as quiet from "./quiet";
import * as dictcount from "./dictcount";
const clock_now = clock.now;
const quiet_due = quiet.due;
const worker_pid = ngx.worker.pid;
const ngx_log = ngx.log;
const WARN = ngx.WARN;
const math_floor = math.floor;
const math_max = math.max;
const math_min = math.min;
const str_format = string.format;
const str_sub = string.sub;
const str_find = string.find;
const str_match = string.match;
const lua_type = type;
const lua_tonumber = tonumber;

const RECORD = "l:";
/** Tickets of waiters in a key's queue in Redis: "w:" .. keyspace .. redis key .. " " .. token, valued as leases. */
const WAITING = "w:";

export interface HeldLease {
  key: string;
  token: string;
  pid: number;
  /** Epoch seconds (ngx.now() scale) when the lease expires unless extended. */
  expires_at: number;
  /** Milliseconds left. */
  ttl: number;
}

/** Dict key counting leases whose record the dict could not take (it was full). */
export const UNRECORDED = "c:ledger:unrecorded";

/** How many leases this nginx could not record since it started (the dict was full). */
export function unrecorded(dict: NgxSharedDict): number {
  const [v] = dict.get(UNRECORDED);
  return lua_type(v) === "number" ? (v as number) : 0;
}

/**
 * Get a dict ready for records: create the UNRECORDED counter now, while there
 * is room, so that counting works once the dict is full (an incr of an
 * existing number needs no memory).
 */
export function prepare(dict: NgxSharedDict): void {
  dict.safe_add(UNRECORDED, 0);
}

/** The dict key of a lease's record. */
export function recordKey(space: string, rkey: string, token: string, shared: boolean): string {
  // One format, not a chain of concatenations (each makes a string of its own).
  return shared ? str_format("%s%s%s %s", RECORD, space, rkey, token) : RECORD + space + rkey;
}

function encode(token: string, key: string, expires: number): string {
  // One format, not a chain of concatenations (one CAT each); not a tail call (see lease.make).
  const v = str_format("%d %d %s %s", worker_pid(), expires, token, key);
  return v;
}

// A full dict fails every acquire: one warning per worker and interval,
// saying how many leases went unrecorded since the previous one.
const full = quiet.make();

function unrecordable(dict: NgxSharedDict, key: string, err: string | undefined): void {
  dictcount.count(dict, UNRECORDED, 1);
  const missed = quiet_due(full);
  if (missed > 0) {
    ngx_log(WARN, "dlock: shared dict full: ", missed, " lease(s) not recorded since the last warning (latest ",
      key, ": ", err, "); held(), status and local waiting miss them, exclusion is unaffected");
  }
}

/**
 * Record a new lease: when its record expires (epoch ms) and the record as
 * written (drop and move take it back), or nil when the dict could not take it
 * (counted in UNRECORDED).
 */
export function record(dict: NgxSharedDict, rec: string, token: string, key: string, ttl: number): LuaMultiReturn<[number | undefined, string | undefined]> {
  const expires = math_floor(clock_now() * 1000) + ttl;
  const v = encode(token, key, expires);
  const [ok, err] = dict.safe_set(rec, v, ttl / 1000);
  if (!ok) {
    unrecordable(dict, key, err);
    return $multi(undefined, undefined);
  }
  return $multi(expires, v);
}

/**
 * Record a waiter's ticket in its key's queue, for as long as it waits: if its
 * worker dies, crash recovery takes the ticket back. The record's dict key, or
 * nil when the dict is full (then the ticket is skipped at its deadline).
 */
export function waiting(dict: NgxSharedDict, space: string, rkey: string, token: string, key: string, ms: number): string | undefined {
  const rec = str_format("%s%s%s %s", WAITING, space, rkey, token);
  const [ok] = dict.safe_set(rec, encode(token, key, math_floor(clock_now() * 1000) + ms), ms / 1000);
  return ok ? rec : undefined;
}

/** The token of the record, and when it expires (epoch ms). */
function tokenOf(dict: NgxSharedDict, rec: string): LuaMultiReturn<[string | undefined, number]> {
  const [v] = dict.get(rec);
  if (lua_type(v) !== "string") {
    return $multi(undefined, 0);
  }
  const [e, t] = str_match(v as string, "^%d+ (%d+) (%S+) ");
  return $multi(t, lua_tonumber(e) ?? 0);
}

/** The pid and expiry (epoch ms) of the holder recorded under `rec`, or nil when none in this nginx. */
export function holder(dict: NgxSharedDict, rec: string): LuaMultiReturn<[number | undefined, number]> {
  const [v] = dict.get(rec);
  if (lua_type(v) !== "string") {
    return $multi(undefined, 0);
  }
  const [pid, expires] = str_match(v as string, "^(%d+) (%d+) ");
  if (pid === undefined) {
    return $multi(undefined, 0);
  }
  return $multi(lua_tonumber(pid), lua_tonumber(expires) ?? 0);
}

/**
 * Drop the record if it is still this lease's (a newer lease of the key, in any
 * worker, has a token of its own). The get and the delete are two dict calls:
 * a successor in another worker that records in between loses its record,
 * which costs bookkeeping, never exclusion. Returns when the deleted record
 * would have expired (epoch ms), or nil when there was none of this lease.
 * For the records of other workers' leases (crash recovery) and of waiters;
 * a lease's own record goes with drop.
 */
export function forget(dict: NgxSharedDict, rec: string, token: string): number | undefined {
  const [t, expires] = tokenOf(dict, rec);
  if (t !== token) return undefined;
  dict.delete(rec);
  return expires;
}

/**
 * Drop a lease's own record, `v` as record() or move() wrote it, if the dict
 * still holds it: a newer lease of the key, in any worker, wrote a record of
 * its own (tokens are unique per lease), which stays. As forget, without
 * reading the record apart: the strings compare as one. True when deleted.
 */
export function drop(dict: NgxSharedDict, rec: string, v: string): boolean {
  const [now] = dict.get(rec);
  if (now !== v) return false;
  dict.delete(rec);
  return true;
}

/**
 * Drop a lease's own record once Redis confirmed that the lease still held
 * its key when the release deleted it (backend.confirmsOwner): no newer lease of
 * the key can have been taken before that, so the record under `rec` is this
 * lease's, or one a lease before it left (its release read it apart and kept
 * it), or none. One dict call where drop makes two; drop for every other ending.
 */
export function dropOwned(dict: NgxSharedDict, rec: string): void {
  dict.delete(rec);
}

/**
 * A lease's own record `v` moved to expire ttl ms from now, after a successful
 * extend: the record as written and its expiry (epoch ms), or nil when the dict
 * no longer holds v (a newer lease's record) or could not take the new one.
 */
export function move(dict: NgxSharedDict, rec: string, v: string, token: string, key: string, ttl: number): LuaMultiReturn<[string | undefined, number]> {
  const [now] = dict.get(rec);
  if (now !== v) return $multi(undefined, 0);
  const expires = math_floor(clock_now() * 1000) + ttl;
  const nv = encode(token, key, expires);
  if (!dict.safe_set(rec, nv, ttl / 1000)[0]) return $multi(undefined, 0);
  return $multi(nv, expires);
}

/** The lease a record stands for, or nil when `v` is not a record. */
function parse(v: unknown, nowMs: number): HeldLease | undefined {
  if (lua_type(v) !== "string") return undefined;
  const [pid, expires, token, key] = str_match(v as string, "^(%d+) (%d+) (%S+) (.*)$");
  if (key === undefined) return undefined;
  const exp = lua_tonumber(expires) ?? 0;
  return { key, token: token!, pid: lua_tonumber(pid) ?? 0, expires_at: exp / 1000, ttl: math_max(0, exp - nowMs) };
}

/** A record as crash recovery needs it: where it is, and the Redis key and token of its lease. */
export interface Record {
  readonly rec: string;
  /** The keyspace (RedisConf.keyspace) of its Redis key; "" in a record written without one. */
  readonly space: string;
  readonly rkey: string;
  readonly key: string;
  readonly token: string;
  readonly pid: number;
  /** A permit's record (one per holder: the token ends its dict key). */
  readonly shared: boolean;
  /** A waiter's ticket, not a lease. */
  readonly waiting: boolean;
}

/**
 * Every record now, with its Redis key, and the dict keys that start with
 * `other` (two characters: crash recovery's marks). Walks the whole dict:
 * once per worker start, never per request.
 */
export function records(dict: NgxSharedDict, other?: string): LuaMultiReturn<[Record[], string[]]> {
  const out: Record[] = [];
  const others: string[] = [];
  const keys = dict.get_keys(0);
  const nowMs = clock_now() * 1000;
  for (const i of $range(1, keys.length())) {
    const k = keys.get(i);
    const what = str_sub(k, 1, 2);
    if (what === RECORD || what === WAITING) {
      const l = parse(dict.get(k)[0], nowMs);
      if (l !== undefined) {
        const tail = " " + l.token;
        const tokened = str_sub(k, -tail.length) === tail;
        let rkey = tokened ? str_sub(k, 3, -tail.length - 1) : str_sub(k, 3);
        let space = "";
        if (str_find(rkey, "^%x%x%x%x%x%x%x%x|")[0] !== undefined) {
          space = str_sub(rkey, 1, 9);
          rkey = str_sub(rkey, 10);
        }
        const waiting = what === WAITING;
        out.push({ rec: k, space, rkey, key: l.key, token: l.token, pid: l.pid, shared: tokened && !waiting, waiting });
      }
    } else if (what === other) {
      others.push(k);
    }
  }
  return $multi(out, others);
}

/**
 * At most `max` leases recorded now (0: all, walking the whole dict), and
 * whether there are (or may be) more. get_keys(n) returns the first n keys of
 * the whole dict, counters and other data included, and locks the dict while
 * it copies them: ask for some more than needed and double while that is not
 * enough, looking at 4 * max + 1024 keys at most (plus `others`: keys the
 * caller knows the dict holds besides records), so a status page stays cheap
 * however many leases are held.
 */
function list(dict: NgxSharedDict, max: number, others = 0): LuaMultiReturn<[HeldLease[], boolean]> {
  const bound = max === 0 ? 0 : max * 4 + 1024 + others;
  const nowMs = clock_now() * 1000;
  let n = max === 0 ? 0 : math_min(max + 64, bound);
  while (true) {
    const keys = dict.get_keys(n);
    const found: HeldLease[] = [];
    let more = false;
    for (const i of $range(1, keys.length())) {
      const k = keys.get(i);
      if (str_sub(k, 1, 2) === RECORD) {
        const l = parse(dict.get(k)[0], nowMs);
        if (l !== undefined) {
          if (max > 0 && found.length === max) {
            more = true;
            break;
          }
          found.push(l);
        }
      }
    }
    // Done with one lease too many, when every key was seen, or at the bound.
    if (n === 0 || more || keys.length() < n || n >= bound) {
      return $multi(found, more || (n > 0 && keys.length() >= n));
    }
    n = math_min(n * 2, bound);
  }
}

/** Every lease recorded now. Walks the dict's keys: meant for held(), not hot paths nor scrapes. */
export function held(dict: NgxSharedDict): HeldLease[] {
  const [all] = list(dict, 0);
  return all;
}

// Exported by name: this module's own uses of them are locals, not lookups in its exports table.
export { list };
