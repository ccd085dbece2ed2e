// The bounded fallback of rate guards (on_error = "local"): while Redis cannot
// decide (a call failed, or the breaker is open), each nginx enforces its share
// of every limit on its own, in its shared dict: rate / fleet per period and
// burst / fleet at once (at least one request's cost), `fleet` being the number of nginx the
// operator says share the limit. With the fleet stated right, the fleet
// together admits no more than the limit itself (plus what each nginx's
// rounding of burst up to a request's cost adds when burst / fleet < cost).
//
// The same GCRA as core/rate.ts, on ngx.now(): per key and limit the
// theoretical arrival time in the dict. Read and written without a lock, as
// lua-resty-limit-traffic's limit.req does: workers of one nginx deciding for
// the same key in the same microseconds may both pass (no yield between the
// read and the write, so never within a worker). Redis' state is not carried
// over either way: the first Redis decision after the fallback starts from
// what Redis last knew.

import * as core from "../core/rate";
import type * as rate from "./rate";
import * as breaker from "./breaker";
import * as clock from "../core/clock";

const clock_now = clock.now;
const math_floor = math.floor;
const math_ceil = math.ceil;
const math_max = math.max;
const str_format = string.format;

/** A limit's share on this nginx: its interval (us), its capacity (interval x burst share), its dict keys' prefix. */
export interface Share {
  readonly interval: number;
  readonly cap: number;
  readonly key: string;
}

/**
 * The shares of guard `name`'s limits on one nginx of `fleet`: a burst share of
 * one request's `cost` at least, else a request could never pass locally.
 */
export function shares(ls: core.Limits, fleet: number, name: string, cost: number): Share[] {
  const out: Share[] = [];
  for (const i of $range(1, ls.list.length)) {
    const l = ls.list[i - 1]!;
    const interval = l.period * 1000 / l.rate * fleet;
    out[i - 1] = { interval, cap: interval * math_max(cost, math_floor(l.burst / fleet)), key: str_format("rl:%s:%d:", name, i) };
  }
  return out;
}

// Per worker, reused: the times read (no yield between their use).
const tats: number[] = [];

/**
 * Decide for hashed key k as the script would, in dict d:
 * the same reply shape ({ 1 or 0, retry ms, per limit remaining, ms until full }).
 */
export function decide(d: NgxSharedDict, k: string, sh: Share[], cost: number): LuaTable<number, number> {
  const now = clock_now() * 1000000;
  const n = sh.length;
  let over = 0;
  for (const i of $range(1, n)) {
    const s = sh[i - 1]!;
    const [v] = d.get(s.key + k);
    let tat = v === undefined ? now : v as number;
    if (tat < now) tat = now;
    tats[i - 1] = tat;
    const o = tat + cost * s.interval - now - s.cap;
    if (o > 1 && o > over) over = o;
  }
  const ok = over === 0;
  const out = new LuaTable<number, number>();
  out.set(1, ok ? 1 : 0);
  out.set(2, math_ceil(over / 1000));
  for (const i of $range(1, n)) {
    const s = sh[i - 1]!;
    let t = tats[i - 1]!;
    if (ok) {
      t = t + cost * s.interval;
      // Expires when it no longer matters: every unit back.
      d.set(s.key + k, t, (t - now) / 1000000 + 0.001);
    }
    out.set(1 + 2 * i, math_max(0, math_floor((s.cap - (t - now) + 1) / s.interval + 0.000000001)));
    out.set(2 + 2 * i, math_ceil((t - now) / 1000));
  }
  return out;
}

/** Give back what decide() charged key k (a later guard refused the request). */
export function giveBack(d: NgxSharedDict, k: string, sh: Share[], cost: number): void {
  const now = clock_now() * 1000000;
  for (const i of $range(1, sh.length)) {
    const s = sh[i - 1]!;
    const [v] = d.get(s.key + k);
    if (v !== undefined) {
      const t = (v as number) - cost * s.interval;
      if (t > now) {
        d.set(s.key + k, t, (t - now) / 1000000 + 0.001);
      } else {
        d.delete(s.key + k);
      }
    }
  }
}

/** In a timer: does Redis answer again? A dry run (it charges nothing) closes the breaker, or opens it again. */
function probeRedis(this: void, premature: boolean, g: rate.Guard): void {
  if (premature) return;
  const [reply, err] = core.decide(g._conf, g._prefix + "probe", g._limits, "0", 1);
  if (reply === undefined) {
    breaker.probeFailed(g, err, g._probeFor, probeRedis);
    return;
  }
  breaker.success(g._dict, g.name);
}

/** A decision made locally while the breaker is open: the probe is due at the end of the cool-down. */
export function degraded(g: rate.Guard): void {
  if (breaker.breakerOpen(g._dict, g.name)) breaker.probeWhenCool(g, g._probeFor, probeRedis);
}

/**
 * With on_error = "local", after the cool-down (half open): may this request
 * ask Redis? Not until a probe in a timer of this nginx has found Redis back
 * (one at a time, for up to a call's timeouts): meanwhile requests keep
 * deciding locally, none waits on a Redis that may still be gone.
 */
export function probe(g: rate.Guard): boolean {
  return breaker.probed(g, g._probeFor, probeRedis);
}

/**
 * A worker starts (dlock.init_worker()) with the breaker open or half open: a
 * reload meanwhile took the probe its workers had scheduled. Its own probe
 * after the cool-down, whether requests come or not; a mark an exited worker
 * left would hold it off, so it is let go first.
 */
export function resume(g: rate.Guard): void {
  if (breaker.breakerState(g._dict, g.name) === "closed") return;
  breaker.probeDone(g._dict, g.name);
  breaker.probeWhenCool(g, g._probeFor, probeRedis);
}
