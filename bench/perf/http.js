// HTTP on loopback: one GET (a fresh connection, or a keep-alive agent's),
// waiting for a server to answer, and a wrk run read back into numbers.
"use strict";
const { spawnSync } = require("node:child_process");
const http = require("node:http");
const { sleep } = require("../lib");

function get(port, p) {
  return new Promise((resolve, reject) => {
    http.get({ host: "127.0.0.1", port, path: p, agent: false }, (res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode, body }));
    }).on("error", reject);
  });
}

async function waitFor(port) {
  for (let i = 0; i < 200; i++) {
    try { if ((await get(port, "/ping")).status === 200) return; } catch (e) { /* not yet */ }
    await sleep(50);
  }
  throw new Error("nothing answers on " + port);
}

// One GET on a keep-alive agent; { status, body } or { error }. Never rejects.
function getKept(port, p, agent) {
  return new Promise((resolve) => {
    const req = http.get({ host: "127.0.0.1", port, path: p, agent }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode, body }));
      res.on("error", (e) => resolve({ error: e.code || e.message }));
    });
    req.setTimeout(30000, () => req.destroy(new Error("client timeout")));
    req.on("error", (e) => resolve({ error: e.code || e.message }));
  });
}

function toMs(s) {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(s);
  if (!m) return NaN;
  return Number(m[1]) * { us: 0.001, ms: 1, s: 1000, m: 60000 }[m[2]];
}

function wrk(url, conns, seconds, extra = []) {
  const r = spawnSync("wrk", ["-t1", "-c" + conns, "-d" + seconds + "s", "--latency", "--timeout", "60s", ...extra, url], { encoding: "utf8" });
  const out = r.stdout;
  const num = (re) => { const m = re.exec(out); return m ? m[1] : undefined; };
  const non2xx = Number(num(/Non-2xx or 3xx responses: (\d+)/) || 0);
  return {
    requests: Number(num(/(\d+) requests in/)),
    rps: Number(num(/Requests\/sec:\s+([\d.]+)/)),
    p50: toMs(num(/\s50%\s+(\S+)/) || ""),
    p99: toMs(num(/\s99%\s+(\S+)/) || ""),
    errors: non2xx + Number(num(/Socket errors: connect (\d+)/) || 0),
  };
}

module.exports = { get, waitFor, getKept, wrk };
