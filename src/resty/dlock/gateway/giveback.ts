// What a request that a guard refuses gives back of what the guards before
// it took. Guards are called one after another (per client, then per API
// key), so a rate guard has charged its limit before a later guard refuses;
// nginx's limit_req charges no limit when a later one refuses, nor does
// lua-resty-limit-traffic's combine(), and a client refused by its API key's
// limit must not use up its address' limit with the refusals. The earlier
// rate guards' charges are given back (one script call each, on the refusing
// path only), and a throttle passed earlier releases its key
// (inflight.refused()): the request never ran.
//
// Only when Redis decided the refusal (or the request was at fault): a
// refusal because Redis failed gives nothing back, as no request should wait
// for a Redis that just failed another guard. And only in the pass through
// the location's rewrite and access phases that took what is given back: a
// request refused after an internal redirect (error_page, X-Accel-Redirect,
// ngx.exec) may have run already, and a guard in content_by_lua may follow
// the application's work. An idempotency claim taken in that pass is not
// completed by the refusal (its response is no answer of the application's):
// the claim is dropped, so a retry runs. What cannot be given back stays
// charged: never more admitted than the limit.

import * as core from "../core/rate";
import type * as redis from "../redis/client";
import * as inflight from "./inflight";
import * as capture from "./idempotency/capture";
import * as fallback from "./rate_local";
import * as request from "../core/request";
import type * as seen from "./seen";

const decide = core.decide;
const request_id = request.id;
const request_alive = request.alive;
const get_phase = ngx.get_phase;
const ngx_ = ngx;
const give_back_here = fallback.giveBack;

/** A rate guard's mark on a request it decided for, and what it charged. */
export interface Mark extends request.Anchor {
  /** The Redis key charged (nil: nothing charged, or given back already). */
  charged?: string;
  /** The key charged in the shared dict by the local fallback instead. */
  chargedHere?: string;
}

/** What giving back needs of a rate guard. */
export interface Charger {
  /** Requests (by id) this guard decided for. */
  readonly _seen: seen.Seen<Mark>;
  readonly _conf: redis.RedisConf;
  readonly _limits: core.Limits;
  readonly _cost: number;
  readonly _dict: NgxSharedDict;
  readonly _shares: fallback.Share[] | undefined;
}

/** Rate guards (made before the workers fork). */
const chargers: Charger[] = [];

/** Watch a rate guard's charges. */
export function register(g: Charger): void {
  chargers.push(g);
}

/** A guard refuses the current request: earlier guards of it give back what they took. Never raises. */
export function refused(): void {
  const phase = get_phase();
  if (phase !== "access" && phase !== "rewrite") return;
  const rid = request_id();
  if (rid === undefined) return;
  const ctx = ngx_.ctx;
  for (const i of $range(1, chargers.length)) {
    const g = chargers[i - 1]!;
    const m = g._seen.byId.get(rid);
    if (m !== undefined && m.ctx === ctx && request_alive(m)) {
      const rkey = m.charged;
      const here = m.chargedHere;
      m.charged = undefined;
      m.chargedHere = undefined;
      if (rkey !== undefined) decide(g._conf, rkey, g._limits, "-1", g._cost);
      if (here !== undefined) give_back_here(g._dict, here, g._shares!, g._cost);
    }
  }
  inflight.refused(rid, ctx);
  capture.refused(rid, ctx);
}
