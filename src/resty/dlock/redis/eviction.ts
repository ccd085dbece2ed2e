// Can a Redis evict lock keys? With maxmemory set and any policy but noeviction, Redis deletes keys
// that have a ttl when it runs out of memory, and every lock key has one: an
// evicted lock lets a second holder in, silently. Each worker asks each pool's
// Redis once, on the pool's first fresh connection (a pool is an endpoint, db
// and credentials: another user may not be allowed to ask), and logs what it
// found once per endpoint. The finding is also kept in the factory's shared
// dict (the "dlock" dict for a conf parsed without one), so the status page of
// any worker shows it:
//   "redis:ep:<endpoint>"  "1 <checked_at_ms> <maxmemory> <policy>"  or  "0 <checked_at_ms> <why not>"
//   "redis:n"              how many endpoints are recorded
//   "redis:i:<n>"          the n-th endpoint (status reads these, it never walks the dict)
// A Redis whose policy changes is checked again after an nginx reload.

import type { RedisConf } from "./client";
import * as hints from "./hints";
import * as clock from "../core/clock";
import * as late from "../core/late";
import * as dictcount from "../core/dictcount";

const lua_pairs = pairs;
const turned_away = hints.turnedAway;
const ERR = ngx.ERR;
const NOTICE = ngx.NOTICE;
const WARN = ngx.WARN;
const lua_tonumber = tonumber;
const lua_tostring = tostring;
const lua_type = type;
const math_floor = math.floor;
const ngx_log = ngx.log;
const clock_now = clock.now;
const on_its_way = late.onItsWay;
const ngx_shared = ngx.shared;
const str_match = string.match;

/** What one Redis endpoint's memory settings mean for lock keys. */
export interface Eviction {
  /** False when neither INFO memory nor CONFIG GET answered (ACL, renamed commands). */
  readonly checked: boolean;
  readonly policy: string;
  /** Bytes; 0 is no limit. */
  readonly maxmemory: number;
  /** The policy evicts keys with a ttl: every policy but noeviction (unknown future ones included). */
  readonly policyEvicts: boolean;
  /** policyEvicts and maxmemory is set: Redis drops lock keys once it is full. */
  readonly canEvict: boolean;
  /** Why it could not be checked (empty when checked). */
  readonly why: string;
  /** Epoch seconds. */
  readonly checkedAt: number;
}

const EVICTION_KEY = "redis:ep:";
const EVICTION_COUNT = "redis:n";
const EVICTION_INDEX = "redis:i:";

/** Pools this worker has checked. */
const checkedPools = new LuaSet<string>();
/**
 * Pools a request of this worker is checking, and since when. A check whose
 * caller went away in the middle (a client abort, a killed thread: never
 * resumed) counts only as long as its two round trips can take: then the next
 * fresh connection checks.
 */
const checking = new LuaTable<string, number>();
/** This worker's findings, per endpoint. */
const findings = new LuaTable<string, Eviction>();
/** "<endpoint> <kind>" this worker has logged. */
const logged = new LuaSet<string>();
/** Per shared dict: the finding (per endpoint) this worker last put there. */
const sharedTo = new LuaTable<NgxSharedDict, LuaTable<string, Eviction>>();

function finding(checked: boolean, policy: string, maxmemory: number, why: string, checkedAt: number): Eviction {
  const policyEvicts = checked && policy !== "noeviction";
  return { checked, policy, maxmemory, policyEvicts, canEvict: policyEvicts && maxmemory > 0, why, checkedAt };
}

/** Keep the finding for this worker; log it once per endpoint and worker. */
function remember(conf: RedisConf, e: Eviction): void {
  const ep = conf.endpoint;
  const old = findings.get(ep);
  // Another pool of the same server may not be allowed to ask: never let that hide an answer.
  if (e.checked || old === undefined || !old.checked) {
    findings.set(ep, e);
  }
  let kind = "ok";
  if (!e.checked) {
    kind = "unknown";
  } else if (e.canEvict) {
    kind = "evicts";
  } else if (e.policyEvicts) {
    kind = "dormant";
  }
  if (kind !== "ok" && !logged.has(ep + " " + kind)) {
    logged.add(ep + " " + kind);
    if (kind === "evicts") {
      ngx_log(ERR, "dlock: redis ", ep, " can evict lock keys (maxmemory-policy ", e.policy, ", maxmemory ",
        e.maxmemory, "): an evicted lock lets a second holder in; set maxmemory-policy noeviction, or give locks a Redis of their own");
    } else if (kind === "dormant") {
      ngx_log(WARN, "dlock: redis ", ep, " has maxmemory-policy ", e.policy, " but no maxmemory: lock keys cannot be ",
        "evicted yet, they can as soon as maxmemory is set; set maxmemory-policy noeviction, or give locks a Redis of their own");
    } else {
      ngx_log(NOTICE, "dlock: redis ", ep, ": could not check whether it can evict lock keys (", e.why,
        "); make sure its maxmemory-policy is noeviction");
    }
  }
}

/**
 * Put this worker's finding about conf's endpoint into conf's shared dict, when
 * that dict does not have it yet. Runs on fresh connections only: the check of a
 * pool runs once, but another factory (another dict) may share its pool.
 */
function share(conf: RedisConf): void {
  const ep = conf.endpoint;
  const e = findings.get(ep);
  // A factory passes its dict along with its `redis` option (core/options.ts); "dlock" is the default dict of status and the gateway.
  const dict = conf.dict ?? ngx_shared.get("dlock");
  if (e === undefined || dict === undefined) {
    return;
  }
  let done = sharedTo.get(dict);
  if (done === undefined) {
    done = new LuaTable<string, Eviction>();
    sharedTo.set(dict, done);
  }
  if (done.get(ep) === e) {
    return;
  }
  const at = math_floor(e.checkedAt * 1000);
  let v = "0 " + lua_tostring(at) + " " + e.why;
  if (e.checked) {
    v = "1 " + lua_tostring(at) + " " + lua_tostring(e.maxmemory) + " " + e.policy;
  }
  // safe_*: a full dict must not evict lease records for this (and then the next fresh connection tries again).
  const [added, err] = dict.safe_add(EVICTION_KEY + ep, v);
  let stored = added === true;
  if (added) {
    const n = dictcount.count(dict, EVICTION_COUNT, 1);
    if (n !== undefined) {
      dict.safe_set(EVICTION_INDEX + lua_tostring(n), ep);
    }
  } else if (err === "exists") {
    // An answer replaces what is there (an older answer, or another worker's "could not check");
    // "could not check" never replaces anything.
    stored = !e.checked || dict.safe_set(EVICTION_KEY + ep, v)[0] === true;
  }
  if (stored) {
    done.set(ep, e);
  }
}

/**
 * Ask Redis for maxmemory and maxmemory-policy, log and record the finding.
 * Returns an error only when the connection failed (then the next fresh connection asks again).
 */
function ask(red: RestyRedis, conf: RedisConf): string | undefined {
  // Marked before the round trip: other requests of this worker opening fresh connections meanwhile skip it.
  checking.set(conf.pool, clock_now());
  let policy: string | undefined;
  let maxmemory: number | undefined;
  const [info, ierr] = red.info("memory");
  if (info === undefined) {
    checking.delete(conf.pool);
    return "dlock: redis " + conf.endpoint + ": " + lua_tostring(ierr) + " during the eviction check";
  }
  if (lua_type(info) === "string") {
    const [p] = str_match(info as string, "[\r\n]maxmemory_policy:([%w%-]+)");
    const [m] = str_match(info as string, "[\r\n]maxmemory:(%d+)");
    policy = p;
    maxmemory = lua_tonumber(m);
  }
  let why = "";
  if (info === false) {
    // Not refused to this user: the server turned the connection away, and closes it.
    const away = turned_away(conf.endpoint, ierr);
    if (away !== undefined) {
      checking.delete(conf.pool);
      return away;
    }
  }
  if (policy === undefined || maxmemory === undefined) {
    // INFO refused (ACL) or without the fields: CONFIG GET, unless renamed or refused too.
    why = "INFO memory: " + (info === false ? lua_tostring(ierr) : "no maxmemory fields");
    const [cfg, cerr] = red.config("get", "maxmemory*");
    if (cfg === undefined) {
      checking.delete(conf.pool);
      return "dlock: redis " + conf.endpoint + ": " + lua_tostring(cerr) + " during the eviction check";
    }
    if (lua_type(cfg) === "table") {
      const t = cfg as LuaTable<number, string>;
      for (const i of $range(1, t.length() - 1, 2)) {
        if (t.get(i) === "maxmemory-policy") policy = lua_tostring(t.get(i + 1));
        if (t.get(i) === "maxmemory") maxmemory = lua_tonumber(t.get(i + 1));
      }
    }
    if (policy === undefined || maxmemory === undefined) {
      why = why + "; CONFIG GET: " + (cfg === false ? lua_tostring(cerr) : "no maxmemory fields");
    }
  }
  if (policy !== undefined && maxmemory !== undefined) {
    remember(conf, finding(true, policy, maxmemory, "", clock_now()));
  } else {
    remember(conf, finding(false, "", 0, why, clock_now()));
  }
  checkedPools.add(conf.pool);
  checking.delete(conf.pool);
  return undefined;
}

function decode(v: unknown): Eviction | undefined {
  if (lua_type(v) !== "string") {
    return undefined;
  }
  const [at, maxmemory, policy] = str_match(v as string, "^1 (%d+) (%d+) (%S+)$");
  if (policy !== undefined) {
    return finding(true, policy, lua_tonumber(maxmemory) ?? 0, "", (lua_tonumber(at) ?? 0) / 1000);
  }
  const [uat, why] = str_match(v as string, "^0 (%d+) (.*)$");
  if (why !== undefined) {
    return finding(false, "", 0, why, (lua_tonumber(uat) ?? 0) / 1000);
  }
  return undefined;
}

/** Prefer an answer over "could not check", then the newest. */
function better(a: Eviction, b: Eviction | undefined): boolean {
  if (b === undefined) return true;
  if (a.checked !== b.checked) return a.checked;
  return a.checkedAt > b.checkedAt;
}

/**
 * Eviction findings per endpoint: this worker's and those other workers shared
 * in `dicts`. Reads a few keys per endpoint, never walks a dict.
 */
export function evictions(dicts: NgxSharedDict[]): LuaTable<string, Eviction> {
  const out = new LuaTable<string, Eviction>();
  for (const [ep, e] of lua_pairs(findings)) {
    out.set(ep, e);
  }
  for (const k of $range(1, dicts.length)) {
    const dict = dicts[k - 1]!;
    const [n] = dict.get(EVICTION_COUNT);
    if (lua_type(n) === "number") {
      for (const i of $range(1, n as number)) {
        const [ep] = dict.get(EVICTION_INDEX + lua_tostring(i));
        if (lua_type(ep) === "string") {
          const e = decode(dict.get(EVICTION_KEY + (ep as string))[0]);
          if (e !== undefined && better(e, out.get(ep as string))) {
            out.set(ep as string, e);
          }
        }
      }
    }
  }
  return out;
}
/**
 * On a fresh connection: ask its Redis, unless this worker has asked for the
 * pool already, and share the finding with conf's dict. An error only when the
 * connection failed meanwhile (then the next fresh connection asks again).
 */
export function check(red: RestyRedis, conf: RedisConf): string | undefined {
  const since = checking.get(conf.pool);
  // INFO, then perhaps CONFIG GET, each within read_timeout; and a second more.
  if (!checkedPools.has(conf.pool) && !on_its_way(since, clock_now(), 2 * conf.read_timeout / 1000)) {
    const err = ask(red, conf);
    if (err !== undefined) return err;
  }
  share(conf);
  return undefined;
}
