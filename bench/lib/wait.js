// Waiting: a sleep, and polling until something holds (both harnesses).
"use strict";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Poll check() (sync or async; a throw counts as "not yet") until it answers
 * truthy, every `every` ms; its answer. After ms: throws "what: not after ms ms
 * (last: ...)" with the last answer or error seen.
 */
async function until(check, ms, what, every = 50) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try { last = await check(); if (last) return last; } catch (e) { last = e.message; }
    if (Date.now() > end) throw new Error(`${what}: not after ${ms} ms (last: ${JSON.stringify(last)})`);
    await sleep(every);
  }
}

module.exports = { sleep, until };
