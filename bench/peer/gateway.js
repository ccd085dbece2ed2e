// The Node.js baseline of make bench: what a Node shop would put in front of a
// handler, node-redlock 5 + ioredis, acquire + release around a trivial handler
// (section 1: any path but the ones below). Section 2 (contention) runs two of
// these processes as its "two instances", on one key:
//   GET /contend?h=HOLD_MS&wait=WAIT_MS&ttl=MS  acquire "contend:hot" (duration ttl)
//       with redlock's own retry loop, hold it h ms, release; answers "ok",
//       "timeout" (the retries ran out: waited the whole wait in vain) or "err ...".
//       The retries: every CONTEND.retryDelay ms ± retryJitter ms (redlock's
//       jitter), retryCount = wait / retryDelay, so it waits about as long as
//       the Lua lines' `wait`.
//   GET /sections  the critical sections since the last call, "enter_us
//       leave_us pid" a line (process.hrtime: CLOCK_MONOTONIC, the clock the
//       nginx lines use too; leave = before the release call).
// Usage: node gateway.js HTTP_PORT REDIS_PORT
"use strict";
const http = require("node:http");
const crypto = require("node:crypto");
const Redis = require("ioredis");
const { default: Redlock } = require("redlock");

const [httpPort, redisPort] = process.argv.slice(2).map(Number);
const redis = new Redis({ host: "127.0.0.1", port: redisPort });
const redlock = new Redlock([redis], { retryCount: 0 });
// Each failed attempt is emitted as an "error" event (ResourceLockedError): expected under contention.
redlock.on("error", () => {});

const CONTEND = { key: "contend:hot", retryDelay: 20, retryJitter: 10 };
let sections = [];
const nowUs = () => Number(process.hrtime.bigint() / 1000n);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function contend(url, res) {
  const hold = Number(url.searchParams.get("h") || 20);
  const wait = Number(url.searchParams.get("wait") || 3000);
  const ttl = Number(url.searchParams.get("ttl") || 1000);
  let lock;
  try {
    lock = await redlock.acquire([CONTEND.key], ttl, {
      retryCount: Math.ceil(wait / CONTEND.retryDelay), retryDelay: CONTEND.retryDelay, retryJitter: CONTEND.retryJitter });
  } catch (e) {
    return res.end(e.name === "ExecutionError" ? "timeout\n" : "err " + e + "\n");
  }
  const enter = nowUs();
  await sleep(hold);
  const leave = nowUs();
  try {
    await lock.release();
  } catch (e) {
    sections.push(`${enter} ${leave} ${process.pid}`);
    return res.end("err release " + e + "\n");
  }
  sections.push(`${enter} ${leave} ${process.pid}`);
  res.end("ok\n");
}

http
  .createServer(async (req, res) => {
    if (req.url === "/ping") return res.end("pong\n");
    const url = new URL(req.url, "http://x");
    if (url.pathname === "/contend") return contend(url, res);
    if (url.pathname === "/sections") {
      res.end(sections.join("\n"));
      sections = [];
      return;
    }
    const key = "node:" + crypto.randomUUID();
    try {
      const lock = await redlock.acquire([key], 10000);
      res.end("ok\n");
      await lock.release();
    } catch (e) {
      res.statusCode = 500;
      res.end(String(e) + "\n");
    }
  })
  .listen(httpPort, "127.0.0.1");
