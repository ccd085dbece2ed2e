// A loop per worker that works in rounds (the watchdog's renewals, the
// gateway keeper's watch): one timer that sleeps between rounds, so rounds
// never overlap (ngx.timer.every would let them when Redis is slow), that
// goes on in a worker that is exiting after nginx -s reload or quit
// (ngx.timer.every stops then; ngx.sleep inside a running timer does not),
// that stops when there is nothing left to do, and hands over to a fresh
// timer now and then, as lua-nginx-module advises for long-lived timers. It
// sleeps on a semaphore, so that work due sooner than its sleep ends (a lease
// with a shorter ttl to renew) can wake it (hurry).
//
// The loop counts as running only once its timer runs, not when it is started:
// nginx may drop a started timer (late.ts), and start() starts another then.

import * as check from "./check";
import * as clock from "./clock";
import * as late from "./late";

const semaphore = require("ngx.semaphore") as NgxSemaphoreModule;
const sem_new = semaphore.new;
const clock_now = clock.now;
const clock_sleep = clock.sleep;
const clock_timeout = clock.timeout;
const on_its_way = late.onItsWay;
const ngx_log = ngx.log;
const ERR = ngx.ERR;
const timer_at = ngx.timer.at;
const lua_pcall = pcall;
const lua_tostring = tostring;

export interface Loop {
  /** For log lines: "watchdog", "gateway keeper". */
  readonly name: string;
  /** Is there anything to do? The loop stops when not. */
  busy(this: void): boolean;
  /** Seconds to sleep before the next round. */
  tick(this: void): number;
  /** One round; a raise is logged and the loop goes on. */
  round(this: void): void;
  /** A timer of the loop runs it now (set by that timer, not when it is started). */
  running: boolean;
  /** When start() started a timer that has not run yet (nil: none). */
  _scheduled?: number;
  /** Wakes its sleep (made in the worker, at its first sleep). */
  _wake?: NgxSemaphore;
  /** Asleep on _wake: hurry() posts it once. */
  _asleep?: boolean;
}

/** Seconds one timer runs before it hands over to a fresh one. */
const HANDOVER = 60;
/** Seconds between looks at whether the fresh timer of a handover runs. */
const LOOK = 0.01;

function nap(l: Loop, seconds: number): void {
  let wake = l._wake;
  if (wake === undefined) {
    [wake] = sem_new(0);
    l._wake = wake;
  }
  if (wake === undefined) {
    clock_sleep(seconds);
    return;
  }
  l._asleep = true;
  const [woken, err] = wake.wait(clock_timeout(seconds));
  l._asleep = false;
  // A wait that could not yield must not turn the loop into a spin.
  if (!woken && err !== "timeout") clock_sleep(seconds);
}

/**
 * l's fresh timer of a handover runs, or nginx dropped it (late.ts):
 * until then the loop is not running, and start() starts no other.
 */
function handedOver(l: Loop, at: number): boolean {
  l._scheduled = at;
  while (!l.running && on_its_way(at, clock_now(), 0)) clock_sleep(LOOK);
  // Whether it ran or not, it is not on its way any more: a late one finds this one running and ends.
  l._scheduled = undefined;
  return l.running;
}

function run(this: void, premature: boolean, l: Loop): void {
  // Started late, after start() took this timer for dropped: the one it started instead runs the loop.
  if (l.running) return;
  l.running = true;
  l._scheduled = undefined;
  // Premature: the worker is exiting; what is still held still needs the rounds.
  let started = clock_now();
  while (l.busy()) {
    nap(l, l.tick());
    const [ok, err] = lua_pcall(l.round);
    if (!ok) {
      ngx_log(ERR, "dlock: ", l.name, ": ", check.text(err));
    }
    const now = clock_now();
    if (now - started >= HANDOVER && l.busy()) {
      // The fresh timer runs the loop once it finds it not running.
      l.running = false;
      const [handed] = timer_at(0, run, l);
      if (handed && handedOver(l, now)) return;
      // Not handed over: this one goes on (nothing yields between the look and this).
      l.running = true;
      started = now;
    }
  }
  // Nothing left: stop, so an exiting worker can exit. start() makes a new one.
  l.running = false;
}

/** Cut the loop's sleep short: its next round is due now (work came in that cannot wait a whole tick). */
export function hurry(l: Loop): void {
  if (l._asleep === true) {
    l._asleep = false;
    l._wake!.post(1);
  }
}

/** Run the loop unless it runs already; nil, or why its timer could not start. */
export function start(l: Loop): string | undefined {
  if (l.running) return undefined;
  const now = clock_now();
  const at = l._scheduled;
  // A late one that runs after all finds another running and ends.
  if (on_its_way(at, now, 0)) return undefined;
  const [ok, err] = timer_at(0, run, l);
  if (!ok) return "dlock: cannot start the " + l.name + ": " + lua_tostring(err);
  l._scheduled = now;
  return undefined;
}
