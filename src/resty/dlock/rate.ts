// resty.dlock.rate: rate limits shared by every nginx of a fleet, decided on
// Redis' clock (GCRA, core/rate.ts), shaped like lua-resty-limit-traffic's
// limiters so that resty.limit.traffic.combine() takes them alongside
// resty.limit.req / count / conn.
//
//   local rate = require "resty.dlock.rate"
//   local lim = assert(rate.new({ dict = "dlock", redis = { host = "127.0.0.1" }, rate = 100, period = 60000, burst = 20 }))
//   local delay, remaining, retry_after = lim:incoming(ngx.var.http_x_api_key, true)   -- a non-empty key (else nil, err)
//   if not delay then
//     if remaining == "rejected" then return ngx.exit(429) end   -- retry_after ms from now
//     ngx.log(ngx.ERR, remaining) return ngx.exit(500)            -- Redis failed
//   end

import * as check from "./core/check";
import * as lease from "./core/lease";
import * as core from "./core/rate";
import * as backend from "./redis/backend";
import type * as redis from "./redis/client";

import * as version from "./version";
export const _VERSION = version.VERSION;

const decide = core.decide;
const least = core.least;
const costOf = core.costOf;
const phaseError = lease.phaseError;
const lua_type = type;
const notSelf = check.notSelf;
const lua_setmetatable = setmetatable;

/** Longest key, in bytes (before the prefix). */
const MAX_KEY = 1024;

/** A limiter's state: its name and prefix to read, the rest private. */
interface State {
  readonly name: string;
  readonly _dict: NgxSharedDict;
  readonly _redis: redis.RedisConf;
  readonly prefix: string;
  /** What the limiter acts on: prefix above is a copy to read (a write to it changes nothing). */
  readonly _prefix: string;
  readonly _limits: core.Limits;
}

export interface Limiter extends State {
  incoming(key: string, commit: boolean, cost?: number): LuaMultiReturn<[number | undefined, number | string | undefined, number | undefined]>;
  uncommit(key: string, cost?: number): LuaMultiReturn<[number | undefined, string | undefined]>;
}

/** The limiters' metatable (its __index, the methods, is set once they are). */
const limiterMt: { __index?: object } = {};

/** The Redis key of key, or nil and the error. */
function keyOf(lim: Limiter, key: unknown, cost: unknown, op: string, call: string): LuaMultiReturn<[string | undefined, string | undefined]> {
  const bad = notSelf(lim, limiterMt, call);
  if (bad !== undefined) return $multi(undefined, bad);
  const perr = phaseError(op);
  if (perr !== undefined) return $multi(undefined, perr);
  if (lua_type(key) !== "string" || (key as string).length === 0 || (key as string).length > MAX_KEY) {
    return check.fail("key must be a non-empty string of at most 1024 bytes", key);
  }
  if (cost !== 1) {
    const [c, cerr] = costOf(cost, lim._limits);
    if (c === undefined) return $multi(undefined, cerr);
  }
  return $multi(lim._prefix + (key as string), undefined);
}

const limiterMethods = {
  /**
   * syntax: delay, remaining = lim:incoming(key, commit, cost?)
   * Admitted: 0 (a rate limit never delays) and the requests that remain under
   * the tightest limit. Refused: nil, "rejected" and the ms until this request
   * would be admitted. Redis failed or bad input: nil and the error. With
   * commit false nothing is charged: the answer is whether it would pass.
   */
  incoming(this: Limiter, key: string, commit: boolean, cost?: number): LuaMultiReturn<[number | undefined, number | string | undefined, number | undefined]> {
    const c = cost === undefined ? 1 : cost;
    const [rkey, err] = keyOf(this, key, c, "incoming", "lim:incoming()");
    if (rkey === undefined) return $multi(undefined, err, undefined);
    const [reply, rerr] = decide(this._redis, rkey, this._limits, commit ? "1" : "0", c);
    if (reply === undefined) return $multi(undefined, rerr, undefined);
    if (reply.get(1) === 0) return $multi(undefined, "rejected", reply.get(2));
    return $multi(0, least(reply, this._limits.list.length), undefined);
  },

  /**
   * syntax: remaining = lim:uncommit(key, cost?)
   * Gives back what a committed incoming() took (combine() calls it when a
   * later limiter refuses): the key's schedule moves back by cost requests,
   * never before now. Returns the requests that remain, or nil and the error.
   */
  uncommit(this: Limiter, key: string, cost?: number): LuaMultiReturn<[number | undefined, string | undefined]> {
    const c = cost === undefined ? 1 : cost;
    const [rkey, err] = keyOf(this, key, c, "uncommit", "lim:uncommit()");
    if (rkey === undefined) return $multi(undefined, err);
    const [reply, rerr] = decide(this._redis, rkey, this._limits, "-1", c);
    if (reply === undefined) return $multi(undefined, rerr);
    return $multi(least(reply, this._limits.list.length), undefined);
  },
};
limiterMt.__index = limiterMethods;

/**
 * syntax: lim, err = rate.new({ dict =, redis =, rate =, period =, burst =, prefix =, name = })
 * (or limits = { {...}, ... } in place of rate, period and burst).
 * @customName new
 */
export function create(this: void, opts: unknown): LuaMultiReturn<[Limiter | undefined, string | undefined]> {
  if (opts === undefined) return $multi(undefined, "dlock: rate.new needs an options table with dict and rate");
  const [o, oerr] = core.newRate(opts);
  if (o === undefined) return $multi(undefined, oerr);
  // rate, period, burst and limits, checked together.
  const [ls, lerr] = core.parse(opts as LuaTable<string, unknown>);
  if (ls === undefined) return $multi(undefined, lerr);
  const conf = o.redis;
  const refused = backend.refuses(conf, "rate");
  if (refused !== undefined) return $multi(undefined, refused);
  const name = o.name;
  const dict = o.dict;
  const prefix = o.prefix ?? "dlock:rate:" + name + ":";
  const lim: State = { name, _dict: dict, _redis: conf, prefix, _prefix: prefix, _limits: ls };
  return $multi(lua_setmetatable(lim, limiterMt) as unknown as Limiter, undefined);
}
