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

/** What a question's function answers: a result, or nil and why. */
export type Answer = LuaMultiReturn<[unknown, string | undefined]>;
export type Asker = (this: void, ...args: unknown[]) => Answer;

// pcall typed for the asker's two results, so they pass through without a table.
const protect = pcall as unknown as (this: void, f: Asker, ...args: unknown[]) => LuaMultiReturn<[boolean, unknown, string | undefined]>;

export interface Question {
  /** When its timer was started (nginx may drop one: late.ts). */
  readonly started: number;
  running: boolean;
  done: boolean;
  result: unknown;
  err: string | undefined;
  /** Callers waiting for the answer; posted once it is in. */
  readonly wake: NgxSemaphore;
  waiting: number;
}

/** Is q being asked, or about to be (a timer started, not dropped)? */
export function underway(q: Question | undefined): boolean {
  return q !== undefined && !q.done && (q.running || on_its_way(q.started, clock_now(), 0));
}

function run(this: void, premature: boolean, q: Question, f: Asker, ...args: unknown[]): void {
  q.running = true;
  const [ok, result, err] = protect(f, ...args);
  if (ok) {
    q.result = result;
    q.err = err;
  } else {
    q.err = "dlock: " + lua_tostring(result);
  }
  q.done = true;
  if (q.waiting > 0) q.wake.post(q.waiting);
}

/** A timer asking f(...): the question, or nil when no timer (or semaphore) can be had (then ask in place). */
export function start(f: Asker, ...args: unknown[]): Question | undefined {
  const [wake] = sem_new(0);
  if (wake === undefined) return undefined;
  const q: Question = { started: clock_now(), running: false, done: false, result: undefined, err: undefined, wake, waiting: 0 };
  if (timer_at(0, run, q, f, ...args)[0] === undefined) return undefined;
  return q;
}

/** q's answer, once it is in (at most `longest` s from now): what the asker answered, or nil and why. */
export function answer(q: Question, longest: number, what: string): Answer {
  if (!q.done) {
    q.waiting++;
    q.wake.wait(longest);
    q.waiting--;
  }
  if (!q.done) return $multi(undefined, "dlock: " + what + ": no answer in " + lua_tostring(longest) + " s");
  return $multi(q.result, q.err);
}
