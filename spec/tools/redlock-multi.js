// node-redlock's multi-resource lock against the test Redis (spec/multikey_spec.lua):
//   node spec/tools/redlock-multi.js <port> <hold ms> <key>...
// Takes every key in one redlock acquire (no retries) for 10 s, prints
// "held <value>" (or "busy"), holds them <hold ms>, releases, prints "released".
// NODE_PATH must reach ioredis and redlock (bench/peer/node_modules).
const Redis = require("ioredis");
const { default: Redlock } = require("redlock");

const [port, hold, ...keys] = process.argv.slice(2);
const redis = new Redis({ port: Number(port), host: "127.0.0.1", lazyConnect: false });
const redlock = new Redlock([redis], { retryCount: 0 });
redlock.on("error", () => {});

(async () => {
  let lock;
  try {
    lock = await redlock.acquire(keys, 10000);
  } catch (e) {
    console.log("busy");
    redis.disconnect();
    return;
  }
  console.log("held " + lock.value);
  await new Promise((r) => setTimeout(r, Number(hold)));
  await lock.release();
  console.log("released");
  redis.disconnect();
})();
