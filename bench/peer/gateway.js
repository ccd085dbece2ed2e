// The Node.js baseline of make bench: what a Node shop would put in front of a
// handler, node-redlock 5 + ioredis, acquire + release around a trivial handler.
// Usage: node gateway.js HTTP_PORT REDIS_PORT
"use strict";
const http = require("node:http");
const crypto = require("node:crypto");
const Redis = require("ioredis");
const { default: Redlock } = require("redlock");

const [httpPort, redisPort] = process.argv.slice(2).map(Number);
const redis = new Redis({ host: "127.0.0.1", port: redisPort });
const redlock = new Redlock([redis], { retryCount: 0 });

http
  .createServer(async (req, res) => {
    if (req.url === "/ping") return res.end("pong\n");
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
