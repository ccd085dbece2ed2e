// The lease of a set of keys (locks:acquire_all, core/multi.ts): one face on
// its keys' own leases (`_parts`), which are what the shared dict records, the
// watchdog renews and crash recovery gives back, each as a single lease. Its
// release and extend run every key's owner-checked script in one round trip
// per endpoint (backend.batch).

import * as backend from "../redis/backend";
import * as check from "./check";
import * as lease from "./lease";
import * as multiscripts from "../redis/multiscripts";
import * as options from "./options";
import * as scripts from "../redis/scripts";
import * as settle from "./settle";
import * as watchdog from "./watchdog";
import * as clock from "./clock";

type Lease = lease.Lease;

const clock_now = clock.now;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
const lua_setmetatable = setmetatable;
const lua_pcall = pcall;
const lua_type = type;
const lua_unpack = unpack as (this: void, t: (string | number)[]) => LuaMultiReturn<(string | number)[]>;
const notSelf = check.notSelf;

/** What the holder of a set is told once when the watchdog finds one of its keys lost. */
export type OnLost = (this: void, lease: MultiLease, why: string) => void;

/**
 * The lease of a set of keys: keys (the caller's order), key (the first),
 * token (one for all), ttl, fences (fencing: one per key, aligned with keys;
 * fence is the first key's) and the methods. The rest is the library's.
 */
export interface MultiLease {
  readonly key: string;
  readonly keys: string[];
  readonly token: string;
  ttl: number;
  readonly fence: number | undefined;
  readonly fences: number[] | undefined;
  readonly shared: boolean;
  /** Each key's own lease (aligned with keys): what is recorded, released, renewed and recovered. */
  readonly _parts: Lease[];
  /** Its keys share a script call (not Redlock): one script releases or extends them all. */
  readonly _together: boolean;
  /** One of the keys was found lost by the watchdog. */
  _lost: boolean;
  _onLost: OnLost | undefined;
  valid(): boolean;
  release(): LuaMultiReturn<[true | undefined, string | undefined]>;
  extend(ttl?: number): LuaMultiReturn<[true | undefined, string | undefined]>;
}

export type AcquireAllResult = LuaMultiReturn<[MultiLease | undefined, string | undefined, number | undefined]>;


/**
 * The owner-checked release (or extend to ms) of every part, in one script
 * call when they share one (together), else one round trip per endpoint
 * (backend.batch): per part (aligned), the reply or the error and fault.
 */
function runAll(parts: Lease[], together: boolean, release: boolean, ms: number): backend.Outcome {
  const first = parts[0]!;
  const conf = first._store.redis;
  const n = parts.length;
  if (together && n > 1) {
    const args: (string | number)[] = [];
    for (const i of $range(2, n)) args.push(parts[i - 1]!._rkey);
    if (release) for (const i of $range(1, n)) args.push(scripts.queueKey(parts[i - 1]!._rkey, conf.slotted));
    args.push(first.token);
    if (!release) args.push(ms);
    const s = release ? multiscripts.release(n) : multiscripts.extend(n);
    const [res, err, fault] = backend.call(conf, s, first._rkey, ...lua_unpack(args));
    const out: backend.Outcome = { replies: new LuaTable(), errors: new LuaTable(), faults: new LuaTable() };
    const t = lua_type(res) === "table" ? res as LuaTable<number, RedisValue> : undefined;
    for (const i of $range(1, n)) {
      if (t !== undefined) {
        out.replies.set(i, t.get(i));
      } else {
        out.errors.set(i, err ?? "dlock: redis failed");
        out.faults.set(i, fault ?? "failed");
      }
    }
    return out;
  }
  const targets: backend.Target[] = [];
  const mss: number[] = [];
  for (const i of $range(1, n)) {
    targets[i - 1] = { rkey: parts[i - 1]!._rkey, token: first.token };
    mss[i - 1] = ms;
  }
  if (release) return backend.batch(conf, first._kind.release, targets, undefined);
  // Redlock puts keys back only while every part is valid (settle.extendScript).
  const at = settle.nowMs();
  let s = settle.extendScript(first, at);
  for (const i of $range(2, n)) if (settle.extendScript(parts[i - 1]!, at) !== s) s = first._kind.extend;
  return backend.batch(conf, s, targets, mss);
}

/**
 * Release parts (owner-checked, in one call when together): not_owner when
 * one was not ours (now, or when an extend or the watchdog found it gone), or
 * the last error.
 */
function releaseParts(parts: Lease[], together: boolean): LuaMultiReturn<[true | undefined, string | undefined]> {
  const open: Lease[] = [];
  let notOwner = false;
  for (const i of $range(1, parts.length)) {
    const p = parts[i - 1]!;
    if (!p._released) {
      p._releasing = true;
      open.push(p);
    } else if (!p._releasing) {
      // Over before any release of ours: found gone.
      notOwner = true;
    }
  }
  if (open.length === 0) return $multi(undefined, "not_owner");
  const out = runAll(open, together, true, 0);
  let err: string | undefined;
  for (const i of $range(1, open.length)) {
    const l = open[i - 1]!;
    const reply = out.replies.get(i);
    if (reply === undefined) {
      settle.unconfirmed(l, out.faults.get(i), true);
      err = out.errors.get(i);
    } else {
      const [ok] = settle.released(l, reply);
      if (ok === undefined) notOwner = true;
    }
  }
  if (err !== undefined) return $multi(undefined, err);
  if (notOwner) return $multi(undefined, "not_owner");
  return $multi(true as const, undefined);
}

/** The sets' metatable (its __index, the methods, is set once they are). */
const multiMt: { __index?: object } = {};

const multiMethods = {
  /** lease:valid(): every key still ours by the local clock, none released or lost. */
  valid(this: MultiLease): boolean {
    if (notSelf(this, multiMt, "lease:valid()") !== undefined) return false;
    if (this._lost) return false;
    const parts = this._parts;
    for (const i of $range(1, parts.length)) {
      if (!parts[i - 1]!.valid()) return false;
    }
    return true;
  },

  /**
   * Every key, owner-checked, in one round trip per endpoint: true; nil,
   * "not_owner" when a key was no longer ours (the others are released all
   * the same); nil, "dlock: redis ..." when Redis did not confirm some (they
   * are still ours as far as we know: release() may be called again).
   */
  release(this: MultiLease): LuaMultiReturn<[true | undefined, string | undefined]> {
    const bad = notSelf(this, multiMt, "lease:release()");
    if (bad !== undefined) return $multi(undefined, bad);
    const perr = lease.phaseError("release");
    if (perr !== undefined) return $multi(undefined, perr);
    return releaseParts(this._parts, this._together);
  },

  /**
   * Every key to `ttl` ms from now (default: the current ttl): true; nil,
   * "not_owner" when a key is no longer ours (the set is over: the others are
   * released); nil, "dlock: redis ..." when Redis did not confirm some.
   */
  extend(this: MultiLease, ttl?: number): LuaMultiReturn<[true | undefined, string | undefined]> {
    const bad = notSelf(this, multiMt, "lease:extend()");
    if (bad !== undefined) return $multi(undefined, bad);
    const perr = lease.phaseError("extend");
    if (perr !== undefined) return $multi(undefined, perr);
    const [ms, terr] = options.extendTtl(ttl, this.ttl);
    if (ms === undefined) return $multi(undefined, terr);
    const parts = this._parts;
    // As a single renewed lease's: the watchdog renews each part a third of the way through its ttl.
    const rerr = options.renewable(watchdog.watches(parts[0]!), ms);
    if (rerr !== undefined) return $multi(undefined, rerr);
    for (const i of $range(1, parts.length)) {
      if (parts[i - 1]!._released) {
        releaseParts(parts, this._together);
        return $multi(undefined, "not_owner");
      }
    }
    for (const i of $range(1, parts.length)) lease.quiesce(parts[i - 1]!);
    const sent = clock_now() * 1000;
    // Renewals of the parts sent meanwhile renew at this ttl (lease.ts _extendingMs).
    for (const i of $range(1, parts.length)) parts[i - 1]!._extendingMs = ms;
    const out = runAll(parts, this._together, false, ms);
    for (const i of $range(1, parts.length)) parts[i - 1]!._extendingMs = undefined;
    let err: string | undefined;
    let notOwner = false;
    for (const i of $range(1, parts.length)) {
      const l = parts[i - 1]!;
      const reply = out.replies.get(i);
      if (reply === undefined) {
        settle.unconfirmed(l, out.faults.get(i), false);
        err = out.errors.get(i);
      } else {
        const [ok] = settle.extended(l, reply, ms, sent);
        if (ok === undefined) notOwner = true;
        else watchdog.extended(l);
      }
    }
    if (notOwner) {
      releaseParts(parts, this._together);
      return $multi(undefined, "not_owner");
    }
    if (err !== undefined) return $multi(undefined, err);
    this.ttl = ms;
    return $multi(true as const, undefined);
  },
};
multiMt.__index = multiMethods;

/** The watchdog lost one key of m: the set is lost, said once to its holder. */
function partLost(m: MultiLease, why: string): void {
  if (m._lost) return;
  m._lost = true;
  const onLost = m._onLost;
  if (onLost !== undefined) {
    const [ok, err] = lua_pcall(onLost, m, why);
    if (!ok) ngx_log(ERR, "dlock: on_lost of the lease on ", m.key, " (acquire_all) raised: ", check.text(err));
  }
}

/** Renew every key of m (renew = true) until it is released; nil, or why the watchdog cannot run (m is given back). */
export function watch(m: MultiLease, onLost: OnLost | undefined): string | undefined {
  m._onLost = onLost;
  const told = (l: Lease, why: string): void => partLost(m, l.key + ": " + why);
  const parts = m._parts;
  for (const i of $range(1, parts.length)) {
    const p = parts[i - 1]!;
    p._onLost = told;
    const err = watchdog.watch(p);
    if (err !== undefined) {
      for (const j of $range(1, parts.length)) watchdog.unwatch(parts[j - 1]!);
      releaseParts(parts, m._together);
      return err;
    }
  }
  return undefined;
}

/** The lease of keys (the caller's order) whose leases are parts (aligned), fences with fencing. */
export function make(keys: string[], parts: Lease[], tok: string, ttl: number, fences: number[] | undefined,
  together: boolean): MultiLease {
  const m = {
    key: keys[0]!, keys, token: tok, ttl, fence: fences && fences[0],
    fences, shared: false, _parts: parts, _together: together, _lost: false, _onLost: undefined,
  };
  // Not a tail call (see lease.make).
  const l = lua_setmetatable(m, multiMt) as unknown as MultiLease;
  return l;
}
