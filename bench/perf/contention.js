// Section 2: contention across two instances. Every line's clients on one key,
// half on each instance; the critical sections each instance logs, merged into
// hand-offs; MONITOR on the pair's Redis for the commands per acquisition.
"use strict";
const http = require("node:http");
const { Monitor, handoffStats, handoffsOf } = require("../monitor");
const { sleep, cpuSeconds } = require("../lib");
const { cfg, log, median, fmt } = require("./config");
const { get, getKept } = require("./http");

/**
 * Section 2's lines on the contending pair contend ({ nginxPorts, peerPorts },
 * and peers once started); nginxPair(): the two nginx's pids.
 */
function contentionLines(contend, nginxPair) {
  return [
    { id: "dlock", name: "resty.dlock acquire with wait (pub/sub wake-ups)", instances: "2 nginx × 2 workers", ports: contend.nginxPorts, path: "/contend/dlock", sections: "/sections", pids: nginxPair },
    { id: "poll", name: "polling lock in Lua (SET NX PX, 2→64 ms jittered backoff, EVAL release)", instances: "2 nginx × 2 workers", ports: contend.nginxPorts, path: "/contend/poll", sections: "/sections", pids: nginxPair },
    { id: "redlock", name: "node-redlock 5 retry loop (retryDelay 20 ms, retryJitter 10 ms, retryCount wait / 20)", instances: "2 Node.js processes", ports: contend.peerPorts, path: "/contend", sections: "/sections", pids: () => contend.peers.map((p) => p.pid) },
  ];
}

const nowUs = () => Number(process.hrtime.bigint() / 1000n); // CLOCK_MONOTONIC, as nginx's and the peers' sections

// clients HTTP clients, alternating between the line's two instances, each looping
// on path until the returned stop() (which resolves once every answer is in).
function contendLoad(ports, p, clients, counts) {
  const agents = ports.map(() => new http.Agent({ keepAlive: true, maxSockets: Infinity }));
  let stopping = false;
  const one = async (i) => {
    const k = i % ports.length;
    while (!stopping) {
      const r = await getKept(ports[k], p, agents[k]);
      const body = r.error ? "" : r.body.trim();
      if (body === "ok") counts.ok++;
      else if (body === "timeout") counts.timeouts++;
      else {
        counts.errors++;
        const msg = r.error || `${r.status} ${body.slice(0, 80)}`;
        counts.errMsgs[msg] = (counts.errMsgs[msg] || 0) + 1;
        await sleep(10);
      }
    }
  };
  const all = Promise.all(Array.from({ length: clients }, (_, i) => one(i)));
  return async () => {
    stopping = true;
    await all;
    for (const a of agents) a.destroy();
  };
}

// The critical sections each instance kept since the last call, merged:
// [{ enterUs, leaveUs, pid, instance (1, 2) }].
async function sectionsOf(ports, p) {
  const out = [];
  for (const [i, port] of ports.entries()) {
    const { body } = await get(port, p);
    for (const line of body.split("\n").filter(Boolean)) {
      const [enterUs, leaveUs, pid] = line.split(" ").map(Number);
      out.push({ enterUs, leaveUs, pid, instance: i + 1 });
    }
  }
  return out;
}

// One line's load for seconds: its answers, commands, critical sections, CPU.
async function contendPhase(contend, l, q, seconds) {
  await sectionsOf(l.ports, l.sections); // nothing left over from before
  const counts = { ok: 0, timeouts: 0, errors: 0, errMsgs: {} };
  const cpu = () => cpuSeconds(l.pids()) + cpuSeconds([contend.redis.pid]);
  const mon = await Monitor.start(contend.redisPort);
  const cpu0 = cpu();
  const t0 = nowUs();
  const stop = contendLoad(l.ports, l.path + q, cfg.contendClients, counts);
  await sleep(seconds * 1000);
  const t1 = nowUs();
  await stop(); // the requests in flight run to their end (a wait at most)
  await sleep(300); // unsubscribes follow the last waiter: counted too
  mon.stop();
  const cpu1 = cpu();
  const secs = await sectionsOf(l.ports, l.sections);
  return { counts, mon, secs, t0, t1, cpuSeconds: cpu1 - cpu0 };
}

// 2. Contention across two instances: C clients on one key (half on each
// instance), each request acquiring it (waiting at most contendWait ms),
// holding it contendHold ms, releasing. Lines interleaved per round.
async function runContention(contend, contLines) {
  const q = `?h=${cfg.contendHold}&wait=${cfg.contendWait}&ttl=${cfg.contendTtl}`;
  const ideal = 1000 / cfg.contendHold;
  for (const l of contLines) await contendPhase(contend, l, q, cfg.contendWarmup); // warm-up: connections, scripts cached, subscribers up
  const cruns = Object.fromEntries(contLines.map((l) => [l.id, []]));
  for (let round = 0; round < cfg.rounds; round++) {
    for (const l of contLines) {
      const { counts, mon, secs, t0, t1, cpuSeconds: cpuS } = await contendPhase(contend, l, q, cfg.contendSeconds);
      const inLoad = (s) => s.enterUs >= t0 && s.enterUs <= t1;
      const { handoffs, overlaps } = handoffsOf(secs);
      const pidMap = new Map(secs.map((s) => [s.pid, s.instance]));
      const h = handoffStats(handoffs.filter((x) => x.atUs >= t0 && x.atUs <= t1), pidMap);
      const acqPerSec = secs.filter(inLoad).length / ((t1 - t0) / 1e6);
      const c = mon.perAcquisition(secs.length);
      cruns[l.id].push({
        acqPerSec, ofIdeal: acqPerSec / ideal, acquisitions: secs.length, ok: counts.ok, timeouts: counts.timeouts,
        errors: counts.errors, errMsgs: counts.errMsgs, overlaps, handoffs: h, cmdsPerAcq: c.perAcquisition,
        attemptsPerAcq: c.acquireAttemptsPerAcquisition, commands: c, cpuMsPerAcq: secs.length ? (cpuS * 1000) / secs.length : NaN,
      });
      log(`  round ${round + 1} ${l.name}: ${fmt(acqPerSec)} acq/s, hand-off p50 ${fmt(h.all.p50, 2)} / p99 ${fmt(h.all.p99, 2)} ms ` +
        `(other instance p50 ${fmt(h.otherInstance.p50, 2)} / p99 ${fmt(h.otherInstance.p99, 2)} ms), ${fmt(c.perAcquisition, 2)} Redis cmds/acq, ` +
        `${counts.timeouts} wait timeouts, ${counts.errors} errors`);
    }
  }
  return contLines.map((l) => {
    const rs = cruns[l.id];
    const sumBy = (f) => rs.reduce((a, r) => { for (const [k, n] of Object.entries(f(r))) a[k] = (a[k] || 0) + n; return a; }, {});
    const acquisitions = rs.reduce((a, r) => a + r.acquisitions, 0);
    return {
      line: l.name, id: l.id, instances: l.instances, clients: cfg.contendClients, hold_ms: cfg.contendHold,
      ttl_ms: cfg.contendTtl, wait_ms: cfg.contendWait, ideal_acq_per_sec: ideal,
      acq_per_sec: median(rs.map((r) => r.acqPerSec)), of_ideal: median(rs.map((r) => r.ofIdeal)),
      handoff_p50_ms: median(rs.map((r) => r.handoffs.all.p50)), handoff_p99_ms: median(rs.map((r) => r.handoffs.all.p99)),
      handoff_other_p50_ms: median(rs.map((r) => r.handoffs.otherInstance.p50)), handoff_other_p99_ms: median(rs.map((r) => r.handoffs.otherInstance.p99)),
      handoffs_other_share: median(rs.map((r) => r.handoffs.otherInstance.n / r.handoffs.all.n)),
      redis_cmds_per_acq: median(rs.map((r) => r.cmdsPerAcq)), acquire_attempts_per_acq: median(rs.map((r) => r.attemptsPerAcq)),
      cpu_ms_per_acq: median(rs.map((r) => r.cpuMsPerAcq)),
      wait_timeouts: rs.reduce((a, r) => a + r.timeouts, 0), requests: rs.reduce((a, r) => a + r.ok + r.timeouts + r.errors, 0),
      errors: rs.reduce((a, r) => a + r.errors, 0), overlaps: rs.reduce((a, r) => a + r.overlaps, 0),
      // Over all rounds: commands by name per acquisition, acquire attempts by the time since the key's last release.
      commands_per_acq_by: Object.fromEntries(Object.entries(sumBy((r) => r.commands.byCommand)).sort((a, b) => b[1] - a[1])
        .map(([k, n]) => [k, Math.round((n / acquisitions) * 100) / 100])),
      acquire_attempts_after_release: sumBy((r) => r.commands.acquireAttemptsAfterRelease),
      error_messages: sumBy((r) => r.errMsgs),
      rounds: rs.map(({ commands, errMsgs, ...r }) => r),
    };
  });
}

module.exports = { contentionLines, runContention };
