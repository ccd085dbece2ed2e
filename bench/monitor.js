// What make bench (section 2) and make torture (the contention rows) both
// measure under contention, one implementation for both:
//   Monitor       MONITOR on the lock Redis: every command the lock's clients
//                 (nginx, the Node.js peers) send it, by command, the harness's
//                 own connections left out; acquire attempts and releases told
//                 apart (see classify), and acquire attempts by the time since
//                 the key's last release.
//   handoffStats  hand-off gaps (one holder leaving a key, the next entering it)
//                 as percentiles, all and by where the next holder was.
"use strict";
const net = require("node:net");

/**
 * A script call (EVAL/EVALSHA) with exactly one argument after its keys is a
 * release (resty.dlock's release script: ARGV token; the compare-and-delete EVAL
 * of the polling locks; node-redlock's release: ARGV value); any other script
 * call, or a SET, is an acquire attempt (resty.dlock's acquire script: ARGV
 * token, ttl, wait left, ticket...; node-redlock's: value, duration). The
 * number of KEYS says nothing (resty.dlock's scripts take 1 to 3). Extends
 * would count as acquire attempts: contention loads make none. Anything else
 * (SUBSCRIBE, PING...) is neither. args: the command line as MONITOR shows it.
 * Returns { kind: "acquire" | "release" | null, key (the first key), keys }.
 */
function classify(args) {
  const cmd = (args[0] || "").toLowerCase();
  if (cmd === "eval" || cmd === "evalsha") {
    const keys = Number(args[2]);
    const after = args.length - 3 - keys;
    return { kind: after === 1 ? "release" : "acquire", key: keys > 0 ? args[3] : undefined, keys };
  }
  if (cmd === "set") return { kind: "acquire", key: args[1], keys: 1 };
  return { kind: null };
}

const BUCKETS = ["< 1 ms", "1-3 ms", "3-10 ms", "10-20 ms", "≥ 20 ms", "before any release"];

/** MONITOR on a Redis: what every client but the harness's own connections (exclude: their local ports) sends, by command. */
class Monitor {
  /** exclude: a Set of local ports of the harness's connections, read at every line (may change meanwhile). */
  static start(port, { exclude = new Set() } = {}) {
    return new Promise((resolve, reject) => {
      const sock = net.createConnection({ host: "127.0.0.1", port });
      sock.once("error", reject);
      sock.once("connect", () => {
        const mon = new Monitor(sock, exclude, resolve);
        mon.sock.write("*1\r\n$7\r\nMONITOR\r\n");
      });
    });
  }
  constructor(sock, exclude, ready) {
    this.sock = sock;
    this.exclude = exclude;
    this.localPort = sock.localPort;
    exclude.add(this.localPort);
    this.commands = {}; // sent by the clients, by name: "evalsha acquire (2 keys)", "subscribe", ...
    this.total = 0;
    this.acquireAttempts = 0;
    this.releases = 0;
    this.inScripts = {}; // run by scripts ([0 lua] lines): PUBLISH...
    this.harness = 0; // lines of the harness's own connections, not counted
    this.clients = new Set();
    // Acquire attempts by the time since the last release of the same key
    // (its first key), in ms: what wakes the contenders.
    this.lastRelease = {};
    this.afterRelease = Object.fromEntries(BUCKETS.map((b) => [b, 0]));
    let rest = "";
    sock.setEncoding("latin1");
    sock.on("data", (d) => {
      rest += d;
      let i;
      while ((i = rest.indexOf("\r\n")) >= 0) {
        const line = rest.slice(0, i);
        rest = rest.slice(i + 2);
        if (line === "+OK") ready(this);
        else this.line(line);
      }
    });
    sock.on("error", () => {});
  }
  // +1700000000.123456 [0 127.0.0.1:54321] "evalsha" "<sha>" "2" "torture:c1" ...
  line(l) {
    const m = /^\+(\d+\.\d+) \[\d+ ([^\]]+)\] (.*)$/.exec(l);
    if (!m) return;
    const [, at, client, rest] = m;
    const args = [...rest.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((x) => x[1]);
    const cmd = (args[0] || "?").toLowerCase();
    if (client === "lua") { this.inScripts[cmd] = (this.inScripts[cmd] || 0) + 1; return; }
    if (this.exclude.has(Number(client.split(":").pop()))) { this.harness++; return; }
    const c = classify(args);
    const name = c.kind && cmd !== "set" ? `${cmd} ${c.kind} (${c.keys} key${c.keys === 1 ? "" : "s"})` : cmd;
    this.commands[name] = (this.commands[name] || 0) + 1;
    this.total++;
    this.clients.add(client);
    const ts = Number(at) * 1000;
    if (c.kind === "release") {
      this.releases++;
      this.lastRelease[c.key] = ts;
    } else if (c.kind === "acquire") {
      this.acquireAttempts++;
      const last = this.lastRelease[c.key];
      const d = ts - last;
      const b = last === undefined ? "before any release" : d < 1 ? "< 1 ms" : d < 3 ? "1-3 ms" : d < 10 ? "3-10 ms" : d < 20 ? "10-20 ms" : "≥ 20 ms";
      this.afterRelease[b]++;
    }
  }
  stop() {
    this.sock.destroy();
    this.exclude.delete(this.localPort);
  }
  /** The counts divided by acquisitions (2 decimals), for a report. */
  perAcquisition(acquisitions) {
    const per = (n) => (acquisitions ? Math.round((n / acquisitions) * 100) / 100 : null);
    return {
      total: this.total, perAcquisition: per(this.total), byCommand: this.commands,
      perAcquisitionBy: Object.fromEntries(Object.entries(this.commands).sort((a, b) => b[1] - a[1]).map(([k, n]) => [k, per(n)])),
      acquireAttempts: this.acquireAttempts, acquireAttemptsPerAcquisition: per(this.acquireAttempts), releases: this.releases,
      inScripts: this.inScripts, clientConnections: this.clients.size, harnessLinesExcluded: this.harness,
      acquireAttemptsAfterRelease: this.afterRelease,
    };
  }
}

const round2 = (x) => (x === null ? null : Math.round(x * 100) / 100);

/** Percentiles of gaps given in µs, in ms. */
function gapStats(us) {
  const s = us.map((x) => x / 1000).sort((a, b) => a - b);
  const q = (f) => (s.length ? round2(s[Math.min(s.length - 1, Math.floor(f * s.length))]) : null);
  return { n: s.length, p50: q(0.5), p90: q(0.9), p99: q(0.99), max: s.length ? round2(s[s.length - 1]) : null,
    mean: s.length ? round2(s.reduce((a, b) => a + b, 0) / s.length) : null };
}

/**
 * Hand-off gaps, all and by where the next holder was: the same worker (process),
 * another worker of the same instance, the other instance. list: [{ gapUs,
 * prevPid, pid }]; pids: Map pid → instance.
 */
function handoffStats(list, pids) {
  const by = { all: [], sameWorker: [], sameInstance: [], otherInstance: [], unknown: [] };
  for (const h of list) {
    by.all.push(h.gapUs);
    const a = pids.get(h.prevPid), b = pids.get(h.pid);
    if (h.prevPid === h.pid) by.sameWorker.push(h.gapUs);
    else if (a === undefined || b === undefined) by.unknown.push(h.gapUs);
    else by[a === b ? "sameInstance" : "otherInstance"].push(h.gapUs);
  }
  const out = {};
  for (const [k, v] of Object.entries(by)) out[k] = gapStats(v);
  return out;
}

/**
 * Hand-offs of one key from its critical sections [{ enterUs, leaveUs, pid }]
 * (any order; one clock for all): sorted by entry, each entry after the
 * previous holder's leaving is a hand-off { gapUs, prevPid, pid, atUs }; an
 * entry before the previous holder left is an overlap (counted, not a hand-off).
 */
function handoffsOf(sections) {
  const s = [...sections].sort((a, b) => a.enterUs - b.enterUs);
  const handoffs = [];
  let overlaps = 0;
  for (let i = 1; i < s.length; i++) {
    const gap = s[i].enterUs - s[i - 1].leaveUs;
    if (gap < 0) overlaps++;
    else handoffs.push({ gapUs: gap, prevPid: s[i - 1].pid, pid: s[i].pid, atUs: s[i].enterUs });
  }
  return { handoffs, overlaps };
}

module.exports = { Monitor, classify, gapStats, handoffStats, handoffsOf, round2 };
