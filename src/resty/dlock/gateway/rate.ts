// Gateway mode "rate": `rate` requests per `period` ms per key, `burst` at
// once, across every nginx sharing the Redis (core/rate.ts: GCRA on Redis'
// clock, one script call per request, several limits decided together).
// A refused request gets reject_status (429) with Retry-After; every answer
// the guard decides carries the IETF httpapi RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-11):
//   RateLimit-Policy: "10-per-1s";q=10;w=1, "1000-per-1h";q=1000;w=3600
//   RateLimit: "10-per-1s";r=4;t=1, "1000-per-1h";r=990;t=4
// q the quota (rate) per window w (period, whole seconds only: the draft has no
// finer unit, so w is left out otherwise), r what remains now under the
// policy, t the effective window: the seconds until the next unit comes back,
// within which no more than r can be used (ratefields.ts). A burst other than
// the rate is said as dlock-burst (the draft asks for vendor-prefixed parameters).
//
// on_error = "local" with `fleet`: while Redis cannot decide, each nginx
// enforces its share of the limits from its shared dict (rate_local.ts).
//
// A rate guard holds nothing while the request runs: nothing to release in
// log(). Its options are checked here, not in gateway.ts.

import * as check from "../core/check";
import * as core from "../core/rate";
import * as backend from "../redis/backend";
import * as redis from "../redis/client";
import * as shared from "./common";
import * as digest from "./digest";
import type * as options from "./options";
import type * as keys from "./key";
import * as fallback from "./rate_local";
import * as ratefields from "./ratefields";
import * as giveback from "./giveback";
import * as request from "../core/request";
import * as stats from "./stats";
import * as breaker from "./breaker";
import * as seen from "./seen";

const decide = core.decide;
const str_format = string.format;
const hashed = digest.key;
const str_sub = string.sub;
const lua_setmetatable = setmetatable;
const incr = stats.incr;
const request_anchor = request.anchor;
const seen_find = seen.find;
const seen_put = seen.put;


/** A rate guard's state: its name and mode to read, the rest private. */
interface State {
  readonly name: string;
  readonly mode: "rate";
  readonly _dict: NgxSharedDict;
  readonly _key: keys.Template;
  readonly _conf: redis.RedisConf;
  readonly _prefix: string;
  readonly _limits: core.Limits;
  readonly _cost: number;
  /** RateLimit-Policy's value (nil: the RateLimit fields are off). */
  readonly _policy: string | undefined;
  /** Per limit, the start of its RateLimit item: "\"<name>\";r=". */
  readonly _items: string[];
  /** Reused to build RateLimit (filled and joined without yielding in between). */
  readonly _parts: string[];
  /** Where another rate guard of the request sent one of its names: the names after this guard's (ratefields.ts). */
  readonly _quoted: string[];
  readonly _ownPolicy: string | undefined;
  readonly _ownItems: string[];
  /** Per limit, its interval and capacity in ms (the RateLimit fields' t); _shareIv, _shareCap: this nginx's share. */
  readonly _iv: number[];
  readonly _cap: number[];
  readonly _shareIv: number[] | undefined;
  readonly _shareCap: number[] | undefined;
  readonly _missingWhat: string;
  readonly _errorWhat: string;
  readonly _onMissing: "pass" | "reject";
  readonly _onError: "allow" | "deny" | "local";
  /** on_error = "local": this nginx's share of each limit. */
  readonly _shares: fallback.Share[] | undefined;
  /** Seconds one probe of a half-open breaker has before another request may probe. */
  readonly _probeFor: number;
  readonly _rejectStatus: number;
  readonly _missingStatus: number;
  readonly _errorStatus: number;
  readonly _headers: LuaTable<string, string> | undefined;
  readonly _breakerFailures: number;
  readonly _breakerCooldown: number;
  /** Requests (by id) this guard decided for, to skip them when an internal redirect brings them back. */
  readonly _seen: seen.Seen<giveback.Mark>;
}

export interface Guard extends State {
  access(): void;
  log(): void;
}

function onRedisFailure(g: Guard, k: string, an: giveback.Mark | undefined): void {
  if (g._shares !== undefined) {
    fallback.degraded(g);
    const reply = fallback.decide(g._dict, k, g._shares, g._cost);
    if (g._policy !== undefined) ratefields.fields(g, reply, g._shareIv!, g._shareCap!);
    if (reply.get(1) === 0) {
      incr(g._dict, g.name, "local_rejected");
      // Refused without Redis: earlier guards keep what they took (common.refuseDown).
      shared.refuseDown(g._headers, g._rejectStatus, reply.get(2));
    }
    incr(g._dict, g.name, "local_admitted");
    if (an !== undefined) an.chargedHere = k;
    return;
  }
  if (!breaker.failedOpen(g)) shared.refuseDown(g._headers, g._errorStatus, undefined);
}

/**
 * Mark the request decided for by this guard: its mark, or false when it was
 * decided for already (an internal redirect brought it back), nil when it
 * cannot be told apart from later requests.
 */
function mark(g: Guard): giveback.Mark | false | undefined {
  // One look at the request (its anchor: address, ngx.ctx and that table's slot), not one for
  // the lookup and another for the record: the first pass of every request needs both.
  const an: giveback.Mark | undefined = request_anchor();
  if (an === undefined) return undefined;
  if (seen_find(g._seen, an.id) !== undefined) return false;
  if (an.ref < 0) return undefined;
  seen_put(g._seen, an);
  return an;
}

function access(g: Guard): void {
  if (!shared.decides(g.name)) return;
  const an = mark(g);
  if (an === false) return;
  const raw = shared.keyOf(g, g._key);
  if (raw === undefined) return;
  // Client-controlled: hashed, so any size and any bytes map to a bounded key.
  const rkey = hashed(g._prefix, raw);
  if ((g._shares !== undefined && (breaker.breakerOpen(g._dict, g.name) || !fallback.probe(g))) ||
    (g._shares === undefined && breaker.skips(g._dict, g.name, g._probeFor))) {
    incr(g._dict, g.name, "short_circuited");
    onRedisFailure(g, str_sub(rkey, g._prefix.length + 1), an);
    return;
  }
  const [reply, err] = decide(g._conf, rkey, g._limits, "1", g._cost);
  if (reply === undefined) {
    breaker.redisFailed(g, err);
    onRedisFailure(g, str_sub(rkey, g._prefix.length + 1), an);
    return;
  }
  breaker.success(g._dict, g.name);
  if (g._policy !== undefined) ratefields.fields(g, reply, g._iv, g._cap);
  if (reply.get(1) === 0) {
    incr(g._dict, g.name, "rejected");
    // Redis refused it: earlier guards give back what they took.
    shared.refuse(g._headers, g._rejectStatus, reply.get(2));
    return;
  }
  incr(g._dict, g.name, "acquired");
  // Given back should a later guard refuse the request (giveback.ts).
  if (an !== undefined) an.charged = rkey;
}

/** The guards' metatable (its __index, the methods, is set once they are). */
const guardMt: { __index?: object } = {};

const guardMethods = {
  /** In access_by_lua (or rewrite_by_lua): let the request through, or refuse it with reject_status and Retry-After. */
  access(this: Guard): void {
    if (shared.misused(this, guardMt, "access")) return;
    access(this);
  },
  /** Nothing to end: a rate guard holds nothing while the request runs. */
  log(this: Guard): void {
    return;
  },
};
guardMt.__index = guardMethods;

/** Validate the options (already checked against gateway.new's names) and build the guard. */
export function create(o: options.Options, name: string): LuaMultiReturn<[Guard | undefined, string | undefined]> {
  const [ls, lerr] = core.parse(o as unknown as LuaTable<string, unknown>);
  if (ls === undefined) return $multi(undefined, lerr);
  const [cost, cerr] = core.costOf(o.cost === undefined ? 1 : o.cost, ls);
  if (cost === undefined) return $multi(undefined, cerr);
  const onError = o.on_error as string as "allow" | "deny" | "local";
  let shares: fallback.Share[] | undefined;
  if (onError === "local") {
    const [fleet, ferr] = shared.fleet(o.fleet, "limit");
    if (fleet === undefined) return $multi(undefined, ferr);
    shares = fallback.shares(ls, fleet, name, cost);
  } else if (o.fleet !== undefined) {
    return check.fail("fleet applies with on_error = \"local\" only", o.fleet);
  }
  const conf = o.redis;
  const refused = backend.refuses(conf, "rate");
  if (refused !== undefined) return $multi(undefined, refused);
  const key = o.key;
  const dict = o.dict;
  const prefix = o.prefix === undefined ? "dlock:gw:" + name + ":" : o.prefix;
  const rejectStatus = o.reject_status === undefined ? 429 : o.reject_status;
  const missingStatus = o.missing_status;
  const onMissing = o.on_missing;
  const headersOn = o.ratelimit_headers;

  const items: string[] = [];
  const ownItems: string[] = [];
  const quoted: string[] = [];
  const iv: number[] = [];
  const cap: number[] = [];
  for (const i of $range(1, ls.list.length)) {
    const l = ls.list[i - 1]!;
    items[i - 1] = str_format("\"%s\";r=", l.name);
    ownItems[i - 1] = str_format("\"%s:%s\";r=", name, l.name);
    quoted[i - 1] = str_format("\"%s\"", l.name);
    iv[i - 1] = l.period / l.rate;
    cap[i - 1] = l.burst * l.period / l.rate;
  }
  let shareIv: number[] | undefined;
  let shareCap: number[] | undefined;
  if (shares !== undefined) {
    shareIv = [];
    shareCap = [];
    for (const i of $range(1, shares.length)) {
      shareIv[i - 1] = shares[i - 1]!.interval / 1000;
      shareCap[i - 1] = shares[i - 1]!.cap / 1000;
    }
  }
  const g: State = {
    name, mode: "rate" as const, _dict: dict, _key: key, _conf: conf, _prefix: prefix, _limits: ls, _cost: cost,
    _policy: headersOn ? ratefields.policyOf(ls, "") : undefined, _items: items, _parts: [] as string[],
    _ownPolicy: headersOn ? ratefields.policyOf(ls, name + ":") : undefined, _ownItems: ownItems, _quoted: quoted,
    _iv: iv, _cap: cap, _shareIv: shareIv, _shareCap: shareCap,
    _missingWhat: shared.missingWhat(onMissing as "pass" | "reject", missingStatus),
    _errorWhat: shared.errorWhat(onError, o.error_status),
    _onMissing: onMissing as "pass" | "reject", _onError: onError, _shares: shares,
    _probeFor: breaker.probeWindow(conf), _rejectStatus: rejectStatus,
    _missingStatus: missingStatus, _errorStatus: o.error_status, _headers: o.headers,
    _breakerFailures: o.breaker_failures, _breakerCooldown: o.breaker_cooldown,
    _seen: seen.create<giveback.Mark>(),
  };
  giveback.register(g);
  stats.prepare(dict, name);
  return $multi(lua_setmetatable(g, guardMt) as unknown as Guard, undefined);
}
