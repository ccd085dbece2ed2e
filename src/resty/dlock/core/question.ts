// A question a worker asks once for all its callers (the sentinels' master, a
// Cluster's slot map), asked by a timer of its own. A caller that asked itself
// and went away in the middle (a client abort, ngx.exit, a killed thread: its
// coroutine is never resumed) left the question open for good: every later
// caller went on with the old answer, or waited on a question nobody asked.
// A timer's question always ends; its callers wait for the answer, each as
// long as the question can take, and one that goes away leaves it to the rest.

import * as clock from "./clock";
import * as late from "./late";

const clock_now = clock.now;
const on_its_way = late.onItsWay;
const timer_at = ngx.timer.at;
const sem_new = (require("ngx.semaphore") as NgxSemaphoreModule).new;
const lua_tostring = tostring;
/** Seconds a waiter sleeps before it looks whether nginx dropped the question's timer. */
const SLICE = 0.5;

/** What a question's function answers: a result, or nil and why. */
export type Answer = LuaMultiReturn<[unknown, string | undefined]>;
export type Asker = (this: void, ctx: unknown) => Answer;

// pcall typed for the asker's two results, so they pass through without a table.
const protect = pcall as unknown as (this: void, f: Asker, ctx: unknown) => LuaMultiReturn<[boolean, unknown, string | undefined]>;

export interface Question {
  /** When its timer was started (nginx may drop one: late.ts). */
  readonly started: number;
  /** Seconds the question can take, once asked. */
  readonly longest: number;
  /** When it began to be asked (nil: not yet). */
  runningSince: number | undefined;
  readonly f: Asker;
  /** What f asks with. */
  readonly ctx: unknown;
  done: boolean;
  result: unknown;
  err: string | undefined;
  /** Callers waiting for the answer; posted once it is in. */
  readonly wake: NgxSemaphore;
  waiting: number;
}

/** Is q being asked (for no longer than it can take), or about to be (a timer started, not dropped)? */
export function underway(q: Question | undefined): boolean {
  if (q === undefined || q.done) return false;
  const now = clock_now();
  const since = q.runningSince;
  if (since !== undefined) return now - since < q.longest;
  return on_its_way(q.started, now, 0);
}

function run(this: void, premature: boolean, q: Question): void {
  // A timer that runs late, after a waiter took the question over (answer()), finds it asked.
  if (q.runningSince !== undefined) return;
  q.runningSince = clock_now();
  const [ok, result, err] = protect(q.f, q.ctx);
  if (ok) {
    q.result = result;
    q.err = err;
  } else {
    q.err = "dlock: " + lua_tostring(result);
  }
  q.done = true;
  if (q.waiting > 0) q.wake.post(q.waiting);
}

/**
 * A timer asking f(ctx), which can take `longest` s: the question, or nil when
 * no timer (or semaphore) can be had (then ask in place).
 */
export function start(longest: number, f: Asker, ctx: unknown): Question | undefined {
  const [wake] = sem_new(0);
  if (wake === undefined) return undefined;
  const q: Question = {
    started: clock_now(), longest, runningSince: undefined, f, ctx, done: false, result: undefined,
    err: undefined, wake, waiting: 0,
  };
  if (timer_at(0, run, q)[0] === undefined) return undefined;
  return q;
}

/**
 * q's answer, once it is in (at most its `longest` s from now): what the
 * asker answered, or nil and why. A question whose timer nginx dropped (at
 * lua_max_running_timers) is asked here by the first waiter to see it.
 */
export function answer(q: Question, what: string): Answer {
  const deadline = clock_now() + q.longest;
  while (!q.done) {
    if (q.runningSince === undefined && !on_its_way(q.started, clock_now(), 0)) {
      run(false, q);
      break;
    }
    const left = deadline - clock_now();
    if (left <= 0) break;
    q.waiting++;
    q.wake.wait(left < SLICE ? left : SLICE);
    q.waiting--;
  }
  if (!q.done) return $multi(undefined, "dlock: " + what + ": no answer in " + lua_tostring(q.longest) + " s");
  return $multi(q.result, q.err);
}
