// The lock Redis (the system under test of the lock and gateway rows): restarted by
// faults, and scanned for what a row left behind (guard keys, lock keys, subscriptions).
"use strict";
const crypto = require("node:crypto");
const fs = require("node:fs");
const path = require("node:path");
const { sleep, once, Resp, hash, waitDead, waitPort } = require("../lib");
const { PREFIX, LOCK_PORT, LOCK_PREFIX, RELEASE_GRACE, LEFT_WATCH, procs, lockRedis, AOF_DIR, GUARDS } = require("./ctx");
const { gwKeys } = require("./load");

function lockArgs(mode) {
  const a = ["--port", String(LOCK_PORT), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
    "--dir", PREFIX, "--logfile", path.join(PREFIX, "logs", `redis-${LOCK_PORT}.log`)];
  if (mode === "aof") a.push("--appendonly", "yes", "--appendfsync", "always", "--dir", AOF_DIR);
  return a;
}

async function startLock(mode) {
  fs.mkdirSync(AOF_DIR, { recursive: true });
  const child = procs.start("redis-server", lockArgs(mode), { stdio: "ignore" });
  lockRedis.pid = child.pid;
  lockRedis.mode = mode;
  lockRedis.starts++;
  const t = Date.now();
  await waitPort(LOCK_PORT);
  // AOF loading answers -LOADING until done: wait for a real reply.
  for (;;) {
    try { await once(LOCK_PORT, "PING"); break; } catch (e) { if (Date.now() - t > 10000) throw e; await sleep(10); }
  }
  return Date.now() - t;
}

async function killLock(sig) {
  const pid = lockRedis.pid;
  process.kill(pid, sig);
  await waitDead(pid);
  procs.drop(pid);
}

/** Lock Redis key of a guard's raw key (resty.dlock.gateway: prefix dlock:gw:<name>:, SHA1 hex of the key). */
const lockKeyOf = (g, raw) => `dlock:gw:${GUARDS[g].name}:` + crypto.createHash("sha1").update(raw).digest("hex");

/**
 * Every gateway guard key in the lock Redis that still holds something: a lock
 * (string) or live permits (zset members whose expiry is still ahead).
 * [{ rkey, guard, key, type, permits, pttl }]
 */
async function guardKeysNow(names) {
  const r = await Resp.connect(LOCK_PORT);
  try {
    const [sec, usec] = await r.cmd("TIME");
    const nowMs = Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
    const out = [];
    for (const rkey of await r.cmd("KEYS", "dlock:gw:*")) {
      const type = await r.cmd("TYPE", rkey);
      const pttl = await r.cmd("PTTL", rkey);
      let permits = 1;
      if (type === "zset") permits = await r.cmd("ZCOUNT", rkey, String(nowMs), "+inf");
      else if (type === "none") continue; // expired between KEYS and TYPE
      if (permits === 0) continue; // only expired permits left: the key is about to go
      const known = names[rkey] || { guard: rkey.split(":")[2], key: "?" };
      out.push({ rkey, guard: known.guard, key: known.key, type, permits, pttl });
    }
    return out;
  } finally {
    r.close();
  }
}

/** As an operator's leaked lease would look: a lock of guard g, or one permit, that expires in ms. */
async function plantLock(g, raw, ms) {
  const rkey = lockKeyOf(g, raw);
  if (GUARDS[g].mode === "concurrency") {
    const [sec] = await once(LOCK_PORT, "TIME");
    const until = Number(sec) * 1000 + ms + 1000;
    await once(LOCK_PORT, "ZADD", rkey, String(until), "planted");
    await once(LOCK_PORT, "PEXPIREAT", rkey, String(until));
  } else {
    await once(LOCK_PORT, "SET", rkey, "planted", "PX", String(ms));
  }
  return rkey;
}

/**
 * RELEASE_GRACE ms after idleAt: what is left; then watch it for LEFT_WATCH ms.
 * Each left key gets heldMs = how long after idleAt it was last seen (null:
 * still there when the watch ended).
 */
async function keysLeft(row, idleAt) {
  const names = {};
  for (const g of row.load.guards) {
    if (GUARDS[g].name === null) continue;
    for (const k of gwKeys(row, g)) names[lockKeyOf(g, k)] = { guard: g, key: k };
  }
  for (const g of (row.control && row.control.plantLocks) || []) names[lockKeyOf(g, `${row.id}-planted`)] = { guard: g, key: `${row.id}-planted` };
  const wait = idleAt + RELEASE_GRACE - Date.now();
  if (wait > 0) await sleep(wait);
  const first = await guardKeysNow(names);
  const checkMs = Date.now() - idleAt;
  const seen = new Map(first.map((k) => [k.rkey, { ...k, heldMs: null }]));
  const watchEnd = Date.now() + LEFT_WATCH;
  let live = first;
  while (live.length && Date.now() < watchEnd) {
    await sleep(100);
    const now = await guardKeysNow(names);
    const still = new Set(now.map((k) => k.rkey));
    for (const k of live) if (!still.has(k.rkey)) seen.get(k.rkey).heldMs = Date.now() - idleAt;
    live = now.filter((k) => seen.has(k.rkey));
  }
  const left = [...seen.values()];
  return {
    checkMs,
    watchMs: LEFT_WATCH,
    keys: left.length,
    permits: left.reduce((a, k) => a + k.permits, 0),
    stillHeld: left.filter((k) => k.heldMs === null).length,
    longestMs: left.length ? Math.max(...left.map((k) => (k.heldMs === null ? checkMs + LEFT_WATCH : k.heldMs))) : 0,
    list: left,
  };
}

// Many waiters per key over both nginx, each client keeping to its key, and
// measured rather than only checked: acquisitions/s against the ideal (one
// holder after another, 20 ms each), every hand-off (one holder leaving, the
// next entering: the witness's handoffs:K log), wait timeouts, and what nginx
// sent to the lock Redis per acquisition (MONITOR over the phase). A row runs
// its phases one after the other on the same clients and keys: the contention
// row loads /crit (resty.dlock: wake-ups) and then /crit-poll (a plain polling
// lock), so both compare within one run. waiters-give-up has clients that
// abort or time out while waiting (and a worker killed), and then checks that
// nothing is left in the lock Redis: no lock key, no wake-up subscription.
/** resty.dlock's release channel (src/resty/dlock/redis/scripts.ts CHANNEL): CHANNEL .. <lock key>. */
const RELEASED_CHANNEL = "dlock:released:";

/**
 * What is left in the lock Redis: keys other than fence counters (a lock, or
 * anything else), release channels anyone still subscribes to (PUBSUB CHANNELS),
 * subscribers of the load keys' channels (PUBSUB NUMSUB), and subscriber
 * connections (kept open IDLE s on purpose; shown, not a leftover).
 */
async function leftBehind(keys) {
  const r = await Resp.connect(LOCK_PORT);
  try {
    const lockKeys = [];
    for (const k of await r.cmd("KEYS", "*")) {
      if (k.endsWith(":fence")) continue;
      lockKeys.push(`${k} (pttl ${await r.cmd("PTTL", k)})`);
    }
    const channels = await r.cmd("PUBSUB", "CHANNELS", RELEASED_CHANNEL + "*");
    const numsub = hash(await r.cmd("PUBSUB", "NUMSUB", ...keys.map((k) => RELEASED_CHANNEL + LOCK_PREFIX + k)));
    const subscribed = Object.values(numsub).reduce((a, b) => a + b, 0);
    const conns = String(await r.cmd("CLIENT", "LIST", "TYPE", "pubsub")).split("\n").filter(Boolean);
    const subConns = conns.map((l) => Number((/ sub=(\d+)/.exec(l) || [0, 0])[1]));
    return {
      lockKeys, channels, numsub, subscribed,
      subscriberConnections: subConns.length, subscriberConnectionsWithSubscriptions: subConns.filter((n) => n > 0).length,
      clean: lockKeys.length === 0 && channels.length === 0 && subscribed === 0,
    };
  } finally {
    r.close();
  }
}

/**
 * From the end of the load (from, ms since epoch) to from + settleMs: the lock
 * Redis every 100 ms; the verdict is its state then. Left-overs are watched
 * watchMs longer, to tell whether they go by themselves.
 */
async function watchLeftovers(keys, from, { settleMs, watchMs = 0 }) {
  let firstClean = null, last = null;
  while (Date.now() < from + settleMs) {
    last = await leftBehind(keys);
    if (last.clean && firstClean === null) firstClean = Date.now() - from;
    if (!last.clean) firstClean = null;
    await sleep(100);
  }
  const atCheck = await leftBehind(keys);
  const out = { settleMs, atCheck, cleanAtCheck: atCheck.clean, cleanSinceMs: atCheck.clean ? firstClean ?? Date.now() - from : null, goneAtMs: null, watchMs };
  if (!atCheck.clean) {
    const end = Date.now() + watchMs;
    while (Date.now() < end) {
      await sleep(250);
      last = await leftBehind(keys);
      if (last.clean) { out.goneAtMs = Date.now() - from; break; }
    }
    out.atEnd = last || atCheck;
  }
  return out;
}

module.exports = { lockArgs, startLock, killLock, lockKeyOf, guardKeysNow, plantLock, keysLeft, RELEASED_CHANNEL, leftBehind, watchLeftovers };
