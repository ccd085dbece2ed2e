// Section 2b: read-mostly, a read-write lock against an exclusive one on the
// contending pair of section 2.
"use strict";
const http = require("node:http");
const { Monitor } = require("../monitor");
const { sleep, cpuSeconds } = require("../lib");
const { cfg, log, median, fmt } = require("./config");
const { getKept } = require("./http");

const RW_LINES = [
  { id: "rw_shared", name: "read-mostly: readers with shared = true, writers exclusive", shared: 1 },
  { id: "rw_exclusive", name: "read-mostly: every request exclusive (the same readers and writers)", shared: 0 },
];

/**
 * Section 2b: cfg.contendClients clients over the contending pair, on one key:
 * each request a reader (cfg.rwReaders of them) or a writer, holding the key
 * cfg.rwHold ms. Line rw_shared takes the readers with shared = true, line
 * rw_exclusive exclusively; lines interleaved per round.
 */
async function readMostlyLines(rwLines, contend, pids) {
  const agents = contend.nginxPorts.map(() => new http.Agent({ keepAlive: true, maxSockets: Infinity }));
  const phase = async (l, seconds) => {
    const c = { r: { ok: 0, ms: [] }, w: { ok: 0, ms: [] }, timeouts: 0, errors: 0, errMsgs: {} };
    let stopping = false;
    const q = `&h=${cfg.rwHold}&wait=${cfg.contendWait}&ttl=${cfg.contendTtl}&shared=${l.shared}`;
    const one = async (i) => {
      const k = i % contend.nginxPorts.length;
      while (!stopping) {
        const mode = Math.random() < cfg.rwReaders ? "r" : "w";
        const t = process.hrtime.bigint();
        const r = await getKept(contend.nginxPorts[k], `/contend/rw?mode=${mode}${q}`, agents[k]);
        const body = r.error ? "" : r.body.trim();
        if (body === "ok " + mode) { c[mode].ok++; c[mode].ms.push(Number(process.hrtime.bigint() - t) / 1e6); }
        else if (body === "timeout") c.timeouts++;
        else { c.errors++; const m = r.error || `${r.status} ${body.slice(0, 80)}`; c.errMsgs[m] = (c.errMsgs[m] || 0) + 1; await sleep(10); }
      }
    };
    const mon = await Monitor.start(contend.redisPort);
    const cpu = () => cpuSeconds(pids()) + cpuSeconds([contend.redis.pid]);
    const cpu0 = cpu(), t0 = Date.now();
    const all = Promise.all(Array.from({ length: cfg.contendClients }, (_, i) => one(i)));
    await sleep(seconds * 1000);
    stopping = true;
    await all;
    const secs = (Date.now() - t0) / 1000;
    await sleep(300);
    mon.stop();
    return { c, secs, cmds: mon.total, cpuS: cpu() - cpu0 };
  };
  for (const l of rwLines) await phase(l, cfg.contendWarmup);
  const runs = Object.fromEntries(rwLines.map((l) => [l.id, []]));
  const pct = (xs, p) => { const a = [...xs].sort((x, y) => x - y); return a.length ? a[Math.min(a.length - 1, Math.floor(p * a.length))] : NaN; };
  for (let round = 0; round < cfg.rounds; round++) {
    for (const l of rwLines) {
      const { c, secs, cmds, cpuS } = await phase(l, cfg.contendSeconds);
      const n = c.r.ok + c.w.ok;
      const r = {
        readsPerSec: c.r.ok / secs, writesPerSec: c.w.ok / secs, readP50: pct(c.r.ms, 0.5), readP99: pct(c.r.ms, 0.99),
        writeP50: pct(c.w.ms, 0.5), writeP99: pct(c.w.ms, 0.99), writeMax: pct(c.w.ms, 1), timeouts: c.timeouts, errors: c.errors,
        errMsgs: c.errMsgs, cmdsPerReq: cmds / n, cpuMsPerReq: (cpuS * 1000) / n,
      };
      runs[l.id].push(r);
      log(`  round ${round + 1} ${l.name}: ${fmt(r.readsPerSec)} reads/s, ${fmt(r.writesPerSec)} writes/s, read p99 ${fmt(r.readP99, 1)} ms, ` +
        `write p99 ${fmt(r.writeP99, 1)} ms, ${c.timeouts} wait timeouts, ${c.errors} errors`);
    }
  }
  for (const a of agents) a.destroy();
  const lines = rwLines.map((l) => {
    const rs = runs[l.id];
    const m = (f) => median(rs.map(f));
    return {
      line: l.name, id: l.id, clients: cfg.contendClients, readers_share: cfg.rwReaders, hold_ms: cfg.rwHold,
      reads_per_sec: m((r) => r.readsPerSec), writes_per_sec: m((r) => r.writesPerSec),
      read_p50_ms: m((r) => r.readP50), read_p99_ms: m((r) => r.readP99), write_p50_ms: m((r) => r.writeP50), write_p99_ms: m((r) => r.writeP99),
      write_max_ms: Math.max(...rs.map((r) => r.writeMax)), redis_cmds_per_req: m((r) => r.cmdsPerReq), cpu_ms_per_req: m((r) => r.cpuMsPerReq),
      wait_timeouts: rs.reduce((a, r) => a + r.timeouts, 0), errors: rs.reduce((a, r) => a + r.errors, 0),
      error_messages: rs.reduce((a, r) => { for (const [k, n] of Object.entries(r.errMsgs)) a[k] = (a[k] || 0) + n; return a; }, {}),
      rounds: rs.map(({ errMsgs, ...r }) => r),
    };
  });
  const sh = lines.find((l) => l.id === "rw_shared"), ex = lines.find((l) => l.id === "rw_exclusive");
  return { lines, reads_ratio: sh && ex ? sh.reads_per_sec / ex.reads_per_sec : null, writes_ratio: sh && ex ? sh.writes_per_sec / ex.writes_per_sec : null };
}

module.exports = { RW_LINES, readMostlyLines };
