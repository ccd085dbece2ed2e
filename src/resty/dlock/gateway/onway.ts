// Releases on their way. A guard's release leaves after the response: the log
// phase has no cosockets, so it rides the worker's next pipeline (or the
// release queue's timer). A client's next request, sent once it has the
// answer and taken by another worker, could reach Redis first and be refused
// busy by its own request before it. So the worker that sends a release marks
// its key in the shared dict until Redis has answered (and a moment after),
// and a guard that would refuse at once (busy, no wait) while its key is
// marked waits for the answer (a round trip; at most SETTLE) and tries once
// more. Across nginx
// instances no mark is seen: there the window stays one Redis round trip.

import * as clock from "../core/clock";

const clock_now = clock.now;
const clock_sleep = clock.sleep;

/** Dict keys: MARK followed by the Redis key; the value, how many releases of it are on their way. */
const MARK = "o:";
/** Seconds a mark lasts whose releases never heard back (a crashed worker): it goes by itself. */
const SENT_TTL = 1;
/**
 * Seconds a mark stays once its last release was answered: a busy answer
 * read just before that release landed, and looked into just after it was
 * answered, still finds that it was.
 */
const ANSWERED_TTL = 0.02;
/** Seconds a refusal waits at most for a marked release. */
const SETTLE = 0.1;
/** Seconds between looks at the mark. */
const LOOK = 0.001;

/**
 * A release of rkey is on its way. A count, not a flag: at a Redis a round
 * trip away, the answer to a client's previous release comes just after its
 * last one was sent, and must not clear that one's mark. Only into free
 * memory: a mark never evicts a lease's record (incr adds no key).
 */
export function sent(dict: NgxSharedDict, rkey: string): void {
  const k = MARK + rkey;
  const [ok, err] = dict.safe_add(k, 1, SENT_TTL);
  if (ok === true || err !== "exists") return;
  const [n] = dict.incr(k, 1);
  // An answered mark, kept a moment, is on its way again: for as long as a release may take.
  if (n === 1) dict.expire(k, SENT_TTL);
}

/** Redis answered a release of rkey (or it was given up). */
export function settled(dict: NgxSharedDict, rkey: string): void {
  const k = MARK + rkey;
  const [n] = dict.incr(k, -1);
  if (n === undefined || n > 0) return;
  if (n < 0) dict.safe_set(k, 0, ANSWERED_TTL);
  else dict.expire(k, ANSWERED_TTL);
}

/**
 * Was a release of rkey on its way when its key was found busy? Then wait
 * until Redis answered it (at most SETTLE s): true, and a refusal is worth
 * one more try.
 */
export function awaited(dict: NgxSharedDict, rkey: string): boolean {
  const k = MARK + rkey;
  const [v] = dict.get(k);
  if (v === undefined) return false;
  const deadline = clock_now() + SETTLE;
  while (clock_now() < deadline) {
    const [n] = dict.get(k);
    if (n === undefined || (n as number) <= 0) break;
    clock_sleep(LOOK);
  }
  return true;
}
