// The loads: HTTP clients looping on /crit (crit rows), on the gateway-guarded locations
// (gateway rows), or keeping to one key each (contention rows), until stopped.
"use strict";
const http = require("node:http");
const { sleep } = require("../lib");
const { HTTP_PORTS, CLIENTS, REQUEST_TIMEOUT, randInt, pick, bump, S } = require("./ctx");

const agent = new http.Agent({ keepAlive: true, maxSockets: 200 });

/** p: the location and its query ("/crit?key=k", "/crit-rw?mode=r&key=k", "/crit?keys=a,b"). */
function crit(port, p) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: p, agent }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode, body: body.trim() }));
      res.on("error", reject);
    });
    req.setTimeout(REQUEST_TIMEOUT, () => req.destroy(new Error("client timeout")));
    req.on("error", reject);
  });
}

function newCounts() {
  return {
    ok: 0, busy: 0, timeout: 0, err: 0, werr: 0, http: 0, other: 0, errMsgs: {}, errRaw: {}, httpMsgs: {}, werrMsgs: {}, okMs: [], okAt: [],
    // Read-write rows: answers by mode (r: readers, w: writers).
    byMode: { r: { ok: 0, timeout: 0, err: 0 }, w: { ok: 0, timeout: 0, err: 0 } },
  };
}

/**
 * load.clients (200 by default) clients, split over both nginx of the target, until
 * stop() says so. L (a crit row's load): L.path is the location (default /crit);
 * L.readers, the share of requests that go as readers (mode=r, the rest mode=w)
 * to a read-write location; with L.sets each request takes a random one of the
 * sets (acquire_all).
 */
function startLoad(counts, L = {}) {
  let stopping = false;
  const { ports, keys } = S.target;
  const loc = L.path || "/crit";
  const sets = L.sets;
  const one = async (i) => {
    const port = ports[i % ports.length];
    while (!stopping) {
      const query = sets ? "keys=" + pick(sets).join(",") : "key=" + keys[Math.floor(Math.random() * keys.length)];
      const mode = L.readers === undefined ? null : Math.random() < L.readers ? "r" : "w";
      try {
        const t = process.hrtime.bigint();
        const { status, body } = await crit(port, mode ? `${loc}?mode=${mode}&${query}` : `${loc}?${query}`);
        const m = mode ? counts.byMode[mode] : null;
        if (m && status === 200) {
          if (body === "ok") m.ok++;
          else if (body === "timeout") m.timeout++;
          else if (body.startsWith("err ")) m.err++;
        }
        if (status !== 200) { counts.http++; bump(counts.httpMsgs, "HTTP " + status); }
        else if (body === "ok") { counts.ok++; counts.okMs.push(Number(process.hrtime.bigint() - t) / 1e6); counts.okAt.push(Date.now()); }
        else if (body === "busy") counts.busy++;
        else if (body === "timeout") counts.timeout++;
        else if (body.startsWith("err ")) { counts.err++; bump(counts.errMsgs, body.slice(4), counts.errRaw); }
        else if (body.startsWith("werr ")) { counts.werr++; bump(counts.werrMsgs, body.slice(5)); }
        else { counts.other++; bump(counts.httpMsgs, "body " + body.slice(0, 60)); }
      } catch (e) {
        counts.http++;
        bump(counts.httpMsgs, e.code || e.message);
        await sleep(10);
      }
    }
  };
  const all = Promise.all(Array.from({ length: L.clients || CLIENTS }, (_, i) => one(i)));
  return () => { stopping = true; return all; };
}

async function drainedLoad(msLoad, L) {
  const stop = startLoad(newCounts(), L);
  await sleep(msLoad);
  await stop();
}

/** The raw keys (the guards' $arg_key) a gateway row uses for guard g. */
function gwKeys(row, g) {
  return Array.from({ length: row.load.keys }, (_, i) => `${row.id}-${g}-k${i + 1}`);
}

/**
 * One request; resolves { status, body } or { aborted } (the client destroyed
 * the socket at abortAt ms) or { error }. Never rejects.
 */
function request(port, p, abortAt, method = "GET") {
  return new Promise((resolve) => {
    let done = false;
    let timer = null;
    const finish = (r) => {
      if (done) return;
      done = true;
      if (timer) clearTimeout(timer);
      resolve(r);
    };
    const headers = method === "GET" || method === "HEAD" ? {} : { "content-length": "0" };
    const req = http.request({ host: "127.0.0.1", port, path: p, agent, method, headers }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => finish({ status: res.statusCode, body: body.trim() }));
      res.on("error", (e) => finish({ error: e.code || e.message }));
    });
    req.end();
    req.setTimeout(REQUEST_TIMEOUT, () => req.destroy(new Error("client timeout")));
    req.on("error", (e) => finish({ error: e.code || e.message }));
    if (abortAt !== null) {
      timer = setTimeout(() => { finish({ aborted: true }); req.destroy(); }, abortAt);
    }
  });
}

function newGwCounts(row) {
  const c = {};
  for (const g of row.load.guards) c[g] = { requests: 0, status: {}, aborted: 0, failover: 0, failed: 0, failures: {}, byMethod: {} };
  return c;
}

/** row.load.clients clients over both nginx, on the row's guards and keys, until stop(). */
function startGatewayLoad(row, counts) {
  const L = row.load;
  const keys = {};
  for (const g of L.guards) keys[g] = gwKeys(row, g);
  let stopping = false;
  const one = async (i) => {
    const home = i % HTTP_PORTS.length;
    while (!stopping) {
      const g = pick(L.guards);
      const c = counts[g];
      const fail = L.fail > 0 && Math.random() < L.fail;
      const abortAt = L.abort && Math.random() < L.abort.p ? randInt(L.abort.atMs) : null;
      const p = `/gw/${g}/${L.via}?g=${g}&key=${pick(keys[g])}&ms=${randInt(L.backendMs)}${fail ? "&fail=1" : ""}`;
      // L.gets: that share of the requests are GETs, the rest POSTs (default all GETs).
      const method = L.gets === undefined || Math.random() < L.gets ? "GET" : "POST";
      c.requests++;
      c.byMethod[method] = (c.byMethod[method] || 0) + 1;
      let r = await request(HTTP_PORTS[home], p, abortAt, method);
      if (r.error === "ECONNREFUSED") {
        // The instance is down (quit-restart): the other one, as a load balancer would.
        c.failover++;
        r = await request(HTTP_PORTS[(home + 1) % HTTP_PORTS.length], p, abortAt, method);
      }
      if (r.aborted) c.aborted++;
      else if (r.status !== undefined) {
        c.status[r.status] = (c.status[r.status] || 0) + 1;
        if (r.status === 409 || r.status === 429 || r.status === 503) await sleep(randInt(L.refusalPauseMs));
      } else {
        c.failed++;
        bump(c.failures, r.error);
        await sleep(50);
      }
    }
  };
  const all = Promise.all(Array.from({ length: L.clients }, (_, i) => one(i)));
  return () => { stopping = true; return all; };
}

function httpText(port, p, ms = 2000) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: p, agent: false }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode, body }));
      res.on("error", reject);
    });
    req.setTimeout(ms, () => req.destroy(new Error("timeout")));
    req.on("error", reject);
  });
}

/**
 * L.clientsPerKey clients per key of L.keys, alternating between both nginx,
 * each keeping to its key, looping on path?key=K until stop(). L.shortWait: that
 * share of the requests asks with a short random `wait` (ms); L.abort: that
 * share is abandoned by its client at a random moment (after atMs).
 */
function startContentionLoad(L, p, counts) {
  let stopping = false;
  const { ports } = S.target;
  const one = async (i) => {
    const port = ports[i % ports.length];
    const key = L.keys[Math.floor(i / ports.length) % L.keys.length];
    while (!stopping) {
      let q = "", abortAt = null, kind = "full";
      const r = Math.random();
      const shortP = L.shortWait ? L.shortWait.p : 0;
      if (r < shortP) { q = "&wait=" + randInt(L.shortWait.ms); kind = "short"; }
      else if (L.abort && r < shortP + L.abort.p) { abortAt = randInt(L.abort.atMs); kind = "aborted"; }
      counts.byKind[kind]++;
      const t = process.hrtime.bigint();
      const res = await request(port, `${p}?key=${key}${q}`, abortAt);
      if (res.aborted) { counts.aborted++; continue; }
      if (res.error) { counts.http++; bump(counts.httpMsgs, res.error); await sleep(10); continue; }
      const { status, body } = res;
      if (status !== 200) { counts.http++; bump(counts.httpMsgs, "HTTP " + status); }
      else if (body === "ok") { counts.ok++; counts.okMs.push(Number(process.hrtime.bigint() - t) / 1e6); counts.okAt.push(Date.now()); }
      else if (body === "timeout") { counts.timeout++; counts.timeoutBy[kind]++; if (kind === "full") counts.timeoutAt.push(Date.now()); }
      else if (body === "busy") counts.busy++;
      else if (body.startsWith("err ")) { counts.err++; bump(counts.errMsgs, body.slice(4), counts.errRaw); }
      else if (body.startsWith("werr ")) { counts.werr++; bump(counts.werrMsgs, body.slice(5)); }
      else { counts.other++; bump(counts.httpMsgs, "body " + body.slice(0, 60)); }
    }
  };
  const all = Promise.all(Array.from({ length: L.clientsPerKey * L.keys.length }, (_, i) => one(i)));
  return () => { stopping = true; return all; };
}

module.exports = { agent, crit, newCounts, startLoad, drainedLoad, gwKeys, request, newGwCounts, startGatewayLoad, httpText, startContentionLoad };
