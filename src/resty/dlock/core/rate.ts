// Rate limits on Redis' clock: GCRA (the generic cell rate algorithm), one
// script call per decision, however many limits a request is under.
//
// Per key, one Redis key holds each limit's theoretical arrival time (TAT):
// a hash of them on Redis' TIME in us, or for a lone limit the key's own
// expiry (ratescripts.ts). A limit of `rate` per `period` ms with `burst` spaces requests
// `interval` = period * 1000 / rate us apart and lets a client be up to
// burst * interval ahead of its schedule: from idle, `burst` at once, then one
// per interval, so in any span of e ms at most burst + rate * e / period pass.
// No window, hence no window edge to double up on.
//
// One key per decision, whatever the number of limits: every topology runs
// it, Cluster included (no hash tags, no cross-slot keys). Either every limit
// of a request has room and each is charged, or none is (a refusal writes
// nothing). Redlock is refused: a majority of independent counters does not
// bound the total.

import * as backend from "../redis/backend";
import type * as redis from "../redis/client";
import * as ratescripts from "../redis/ratescripts";
import * as check from "./check";
import * as options from "./options";
import * as schema from "./schema";

const call = backend.call;
const RATE = ratescripts.RATE;
const RATE_ONE = ratescripts.RATE_ONE;
const RATE_BACK = ratescripts.RATE_BACK;
const RATE_ONE_BACK = ratescripts.RATE_ONE_BACK;
const str_format = string.format;
const lua_type = type;
const lua_tostring = tostring;
const math_floor = math.floor;
const math_ceil = math.ceil;
const str_sub = string.sub;
const lua_pairs = pairs;
const lua_unpack = unpack as (this: void, t: (string | number)[]) => LuaMultiReturn<(string | number)[]>;

/** One limit: `rate` requests per `period` ms, `burst` at once; `name` its policy name in RateLimit headers. */
export interface Limit {
  readonly rate: number;
  readonly period: number;
  readonly burst: number;
  readonly name: string;
}

/** The limits of a limiter or guard, with the script arguments they always send, made once. */
export interface Limits {
  readonly list: Limit[];
  /** interval (us), burst, per limit. */
  readonly args: (string | number)[];
  /** The smallest burst: no request may cost more. */
  readonly most: number;
  /**
   * A lone limit's interval (us) and burst * interval, for the one-limit
   * script and its answer; nil with several limits.
   */
  readonly interval: number | undefined;
  readonly capacity: number;
  /** A lone limit's interval is whole ms: the one-limit script is exact for any cost (ONE_SLACK). */
  readonly wholeMs: boolean;
}

/** Longest period: 30 days, in ms. */
export const MAX_PERIOD = 30 * 86400000;
const MAX_RATE = 1000000000;

/**
 * Longest capacity (burst * period / rate, the ms a whole burst takes to come
 * back): 10 years. Both scripts keep a time of that many us exact (a double's
 * 53 bits, the one-limit script's answer 4 * us ahead + outcome within 2^52,
 * the general script's TAT on Redis' clock written with %d).
 */
const MAX_CAPACITY = 10 * 365 * 86400000;

/**
 * The one-limit script reads time from the key's expiry, in Redis' ms: a
 * request may see up to 1 ms less room than there is. A capacity short of a
 * request's cost and 1 ms would then admit less than the rate (3000 a second
 * with a burst of 1: one a ms), unless the interval is whole ms (every TAT then
 * falls on a ms, and the key expires right at it): such a decision goes to the
 * general script, which reads TIME in us.
 */
const ONE_SLACK = 1000;

/** A short policy name for a limit: "100-per-1m", "10-per-1s", "5-per-250ms". */
function nameOf(rate: number, period: number): string {
  let p = lua_tostring(period) + "ms";
  if (period % 86400000 === 0) p = lua_tostring(period / 86400000) + "d";
  else if (period % 3600000 === 0) p = lua_tostring(period / 3600000) + "h";
  else if (period % 60000 === 0) p = lua_tostring(period / 60000) + "m";
  else if (period % 1000 === 0) p = lua_tostring(period / 1000) + "s";
  return lua_tostring(rate) + "-per-" + p;
}

/**
 * One limit from rate, period, burst and name (burst defaults to rate: a
 * client idle for a period may spend it at once). `where` prefixes the
 * option names in messages ("limits[2].").
 */
function limit(where: string, rate: unknown, period: unknown, burst: unknown, name: unknown): LuaMultiReturn<[Limit | undefined, string | undefined]> {
  const [r, e1] = check.integer(where + "rate", rate, 1, MAX_RATE, "a positive integer");
  if (r === undefined) return $multi(undefined, e1);
  const [p, e2] = check.integer(where + "period", period === undefined ? 1000 : period, 1, MAX_PERIOD, "a positive integer of ms");
  if (p === undefined) return $multi(undefined, e2);
  const [b, e3] = check.integer(where + "burst", burst === undefined ? r : burst, 1, MAX_RATE, "a positive integer");
  if (b === undefined) return $multi(undefined, e3);
  const capacity = b * p / r;
  if (capacity > MAX_CAPACITY) {
    return check.fail(where + "burst * period / rate (the ms a whole burst takes to come back) must be at most " +
      lua_tostring(MAX_CAPACITY) + " (10 years)", capacity);
  }
  let n = nameOf(r, p);
  if (name !== undefined) {
    // An sf-String in the RateLimit fields: printable ASCII, quoted; kept to a token's characters.
    const [s, e4] = check.str(where + "name", name, 64);
    if (s === undefined) return $multi(undefined, e4);
    if (check.found(s, "[^%w%-_%.:/]")) return check.fail(where + "name must be letters, digits and -_.:/", s);
    n = s;
  }
  return $multi({ rate: r, period: p, burst: b, name: n }, undefined);
}

/** The limits a decision is under, with the arguments the script gets for them. */
function limits(list: Limit[]): LuaMultiReturn<[Limits | undefined, string | undefined]> {
  const args: (string | number)[] = [];
  let most = list[0]!.burst;
  const seen = new LuaSet<string>();
  for (const i of $range(1, list.length)) {
    const l = list[i - 1]!;
    if (seen.has(l.name)) return check.fail("two limits share the policy name " + l.name + " (give each a name)", l.name);
    seen.add(l.name);
    args[2 * i - 2] = str_format("%.17g", l.period * 1000 / l.rate);
    args[2 * i - 1] = lua_tostring(l.burst);
    if (l.burst < most) most = l.burst;
  }
  const iv = list[0]!.period * 1000 / list[0]!.rate;
  const cap = list[0]!.burst * iv;
  const one = list.length === 1;
  return $multi({ list, args, most, interval: one ? iv : undefined, capacity: one ? cap : 0, wholeMs: iv % 1000 === 0 },
    undefined);
}


// The one-limit script's answer as the general script's reply. One table,
// refilled by each decision: every caller reads it before it yields.
const answer = new LuaTable<number, number>();

/**
 * The general script's reply from the one-limit script's answer n:
 * 4 * (us the client is ahead after the decision, or before a refusal) +
 * outcome. Worked out here as the general script does in Redis.
 */
function answered(n: number, ls: Limits, cost: number): LuaTable<number, number> {
  const ahead = math_floor(n / 4);
  const outcome = n - ahead * 4;
  const iv = ls.interval!;
  const cap = ls.capacity;
  let left = math_floor((cap - ahead + 1) / iv + 0.000000001);
  if (left < 0) left = 0;
  answer.set(1, outcome);
  answer.set(2, outcome === 0 ? math_ceil((ahead + cost * iv - cap) / 1000) : 0);
  answer.set(3, left);
  answer.set(4, math_ceil(ahead / 1000));
  return answer;
}

/**
 * The script's reply for key rkey under ls: mode "1" (decide, charge when
 * admitted), "0" (decide only) or "-1" (give cost back). nil, err and the
 * fault when Redis failed. The reply of a lone limit is refilled by the next
 * decision: read it before yielding.
 */
export function decide(conf: redis.RedisConf, rkey: string, ls: Limits, mode: string, cost: number):
  LuaMultiReturn<[LuaTable<number, number> | undefined, string | undefined, backend.Fault | undefined]> {
  const a = ls.args;
  const iv = ls.interval;
  const one = iv !== undefined && (ls.wholeMs || cost * iv + ONE_SLACK <= ls.capacity);
  let res: RedisValue | undefined;
  let err: string | undefined;
  let fault: backend.Fault | undefined;
  // Every argument a string: the encoder's tostring() of a number is not compiled.
  const c = cost === 1 ? "1" : lua_tostring(cost);
  // A lone limit (the usual case): its own script, with a fixed number of arguments (unpack() keeps the call out of LuaJIT's traces).
  const back = mode === "-1";
  if (one) [res, err, fault] = call(conf, (back && RATE_ONE_BACK) || RATE_ONE, rkey, mode, c, a[0]!, a[1]!);
  else [res, err, fault] = call(conf, (back && RATE_BACK) || RATE, rkey, mode, c, ...lua_unpack(a));
  if (res === undefined) return $multi(undefined, err, fault);
  if (lua_type(res) !== (one ? "number" : "table")) return $multi(undefined, "dlock: rate script answered " + check.show(res), "failed");
  const reply = one ? answered(res as number, ls, cost) : res as unknown as LuaTable<number, number>;
  return $multi(reply, undefined, undefined);
}

/**
 * A request's cost (its weight): a positive integer, at most the smallest
 * burst of ls (more could never pass: bad input, not a refusal); nil and the
 * error otherwise.
 */
function costOf(cost: unknown, ls: Limits): LuaMultiReturn<[number | undefined, string | undefined]> {
  if (lua_type(cost) === "number" && cost === math_floor(cost as number) && (cost as number) >= 1 && (cost as number) <= ls.most) {
    return $multi(cost as number, undefined);
  }
  return check.fail("cost must be a positive integer, at most the smallest burst (" + lua_tostring(ls.most) + ")", cost);
}

/** Remaining requests under limit i (1-based) of a reply. */
export function remaining(reply: LuaTable<number, number>, i: number): number {
  return reply.get(1 + 2 * i);
}

/** ms until limit i of a reply is full again. */
export function full(reply: LuaTable<number, number>, i: number): number {
  return reply.get(2 + 2 * i);
}

/** The smallest remaining of a reply, over n limits. */
export function least(reply: LuaTable<number, number>, n: number): number {
  // One limit without the loop: a loop on the request's path keeps the whole path out of LuaJIT's traces.
  // Locals, then the returns: not tail calls into a builtin (see core/clock.ts).
  if (n === 1) {
    const one = math_floor(reply.get(3));
    return one;
  }
  let r = reply.get(3);
  for (const i of $range(2, n)) {
    const x = reply.get(1 + 2 * i);
    if (x < r) r = x;
  }
  const lowest = math_floor(r);
  return lowest;
}

/** Most limits on one decision. */
const MAX_LIMITS = 8;
const SINGLE = ["rate", "period", "burst"];
const LIMIT_OPTIONS = check.set("rate", "period", "burst", "name");

/**
 * The limits of an options table: rate, period and burst for one, or
 * `limits = { { rate =, period =, burst =, name = }, ... }` for several (not both).
 */
export function parse(o: LuaTable<string, unknown>): LuaMultiReturn<[Limits | undefined, string | undefined]> {
  const many = o.get("limits");
  if (many === undefined) {
    if (o.get("rate") === undefined) {
      return check.fail("rate must be a positive integer (requests per period), or limits a list of { rate =, period = }", undefined);
    }
    const [l, err] = limit("", o.get("rate"), o.get("period"), o.get("burst"), undefined);
    if (l === undefined) return $multi(undefined, err);
    return limits([l]);
  }
  for (const i of $range(1, 3)) {
    const k = SINGLE[i - 1]!;
    if (o.get(k) !== undefined) return check.fail(k + " and limits exclude each other: give each limit its own " + k, o.get(k));
  }
  const what = "limits must be a list of 1 to 8 tables { rate =, period =, burst =, name = }";
  if (lua_type(many) !== "table") return check.fail(what, many);
  const t = many as LuaTable<AnyNotNil, unknown>;
  const n = (t as unknown as unknown[]).length;
  if (n < 1 || n > MAX_LIMITS) return check.fail(what, many);
  for (const [k] of lua_pairs(t)) {
    if (lua_type(k) !== "number" || (k as number) < 1 || (k as number) > n || k !== math_floor(k as number)) return check.fail(what, k);
  }
  const list: Limit[] = [];
  for (const i of $range(1, n)) {
    const where = "limits[" + lua_tostring(i) + "].";
    const [e, eerr] = check.options(str_sub(where, 1, -2), t.get(i), LIMIT_OPTIONS);
    if (e === undefined) return $multi(undefined, eerr);
    const [l, err] = limit(where, e.get("rate"), e.get("period"), e.get("burst"), e.get("name"));
    if (l === undefined) return $multi(undefined, err);
    list[i - 1] = l;
  }
  return limits(list);
}

// ------------------------------------------------------------------ rate.new's options

/** A limit's numbers: checked together by parse() (rate with burst, limits against the other three). */
function given(this: void, v: unknown): LuaMultiReturn<[unknown, string | undefined]> {
  return $multi(v, undefined);
}

/** The option table of rate.new, declared once; the README's table is checked against it (spec/options_spec.lua). */
export const NEW_RATE: schema.Spec[] = [
  options.DICT,
  { name: "name", kind: "check", check: options.checkName, default: "rate" },
  options.REDIS,
  { name: "rate", kind: "check", check: given, doc: "required (or `limits`)" },
  { name: "period", kind: "check", check: given, doc: "1000" },
  { name: "burst", kind: "check", check: given, doc: "`rate`" },
  { name: "limits", kind: "check", check: given, doc: "none" },
  { name: "prefix", kind: "string", maxLen: 256, doc: "`dlock:rate:<name>:`" },
];

/** What rate.new's schema hands back. */
export interface NewRate {
  readonly dict: NgxSharedDict;
  readonly name: string;
  readonly redis: redis.RedisConf;
  readonly prefix: string | undefined;
}

export const newRate = schema.compile<NewRate>("rate.new options", NEW_RATE, { labels: "" });

// Exported by name: this module's own use of it is a local, not a lookup in its exports table.
export { answered, costOf, limit, limits };
