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

/** Dict keys: MARK followed by the Redis key. */
const MARK = "o:";
/** The mark's value while the release is on its way, and once Redis answered it. */
const SENT = 1;
const ANSWERED = 0;
/** Seconds a mark lasts whose release never heard back (a crashed worker): it goes by itself. */
const SENT_TTL = 1;
/**
 * Seconds an answered release stays marked: a busy answer read just before
 * the release landed, and looked into just after it was answered, still
 * finds that it was (the mark, a number, is overwritten where it is).
 */
const ANSWERED_TTL = 0.02;
/** Seconds a refusal waits at most for a marked release. */
const SETTLE = 0.1;
/** Seconds between looks at the mark. */
const LOOK = 0.001;

/** A release of rkey is on its way (only into free memory: a mark never evicts a lease's record). */
export function sent(dict: NgxSharedDict, rkey: string): void {
  dict.safe_set(MARK + rkey, SENT, SENT_TTL);
}

/** Redis answered the release of rkey (or it was given up). */
export function settled(dict: NgxSharedDict, rkey: string): void {
  dict.safe_set(MARK + rkey, ANSWERED, ANSWERED_TTL);
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
  while (dict.get(k)[0] === SENT && clock_now() < deadline) clock_sleep(LOOK);
  return true;
}
