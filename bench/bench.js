// make bench: resty.dlock side by side with its baselines, in one run, on one
// machine, lines interleaved (A B A B ...), reported as ratios. Writes
// bench/results/latest.{md,json} and PNG plots. `--smoke` is a short run for
// make test (numbers printed, never asserted).
"use strict";
const { spawn, spawnSync, execFileSync } = require("node:child_process");
const fs = require("node:fs");
const http = require("node:http");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");

const root = path.resolve(__dirname, "..");
const smoke = process.argv.includes("--smoke");
const cfg = smoke
  ? { rounds: 1, seconds: 1, conns: 32, contendClients: 20, contendSeconds: 2, hold: 5, memRequests: 20000, dictLeases: 2000 }
  : { rounds: 5, seconds: 5, conns: 50, contendClients: 50, contendSeconds: 6, hold: 5, memRequests: 1000000, dictLeases: 10000 };
const outDir = path.join(root, "bench", "results");
const prefix = fs.mkdtempSync("/tmp/dlock-bench.");
fs.chmodSync(prefix, 0o755);
fs.mkdirSync(path.join(prefix, "logs"));
const pids = [];

function log(...a) {
  console.log(...a);
}

function cleanup() {
  for (const pid of pids.reverse()) {
    try { process.kill(pid, "SIGTERM"); } catch (e) { /* gone already */ }
  }
  spawnSync("sleep", ["0.5"]);
  for (const pid of pids) {
    try { process.kill(pid, "SIGKILL"); } catch (e) { /* gone already */ }
  }
  fs.rmSync(prefix, { recursive: true, force: true });
}
process.on("exit", cleanup);
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(130));

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

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
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("nothing answers on " + port);
}

function start(cmd, args, opts = {}) {
  const p = spawn(cmd, args, { stdio: ["ignore", "ignore", "inherit"], ...opts });
  pids.push(p.pid);
  return p;
}

// /proc/<pid>/stat utime + stime of pid and its children, in seconds.
function cpuSeconds(pidList) {
  const tick = 100;
  let sum = 0;
  for (const pid of pidList) {
    try {
      const f = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
      sum += (Number(f[11]) + Number(f[12])) / tick;
    } catch (e) { /* exited */ }
  }
  return sum;
}

function children(pid) {
  const r = spawnSync("pgrep", ["-P", String(pid)], { encoding: "utf8" });
  return r.stdout.split("\n").filter(Boolean).map(Number);
}

function redisCalls(port) {
  const out = execFileSync("redis-cli", ["-p", String(port), "info", "commandstats"], { encoding: "utf8" });
  let calls = 0;
  for (const m of out.matchAll(/cmdstat_(\w+):calls=(\d+)/g)) if (m[1] !== "info") calls += Number(m[2]);
  return calls;
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

// Until Redis has seen no command for 100 ms (at most 5 s).
async function quiet(port) {
  let prev = redisCalls(port);
  for (let i = 0; i < 50; i++) {
    await new Promise((r) => setTimeout(r, 100));
    const now = redisCalls(port);
    if (now === prev) return;
    prev = now;
  }
}

const median = (xs) => {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN;
};
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};
const fmt = (x, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : "-");

async function main() {
  const redisPort = await freePort();
  const httpPort = await freePort();
  const nodePort = await freePort();

  const redis = start("redis-server", ["--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
    "--dir", prefix, "--logfile", path.join(prefix, "logs", "redis.log")]);
  execFileSync("bash", ["-c", `. '${root}/nginx/lib.sh'; wait_port ${redisPort} 10 && render_conf '${root}/nginx/bench.conf' '${prefix}' '${prefix}/nginx.conf' HTTP_PORT=${httpPort} REDIS_PORT=${redisPort}`]);
  const nginxBin = process.env.DLOCK_NGINX || "nginx";
  const nginx = start(nginxBin, ["-p", prefix, "-c", path.join(prefix, "nginx.conf"), "-g", "daemon off;"]);
  const node = start(process.execPath, [path.join(root, "bench", "peer", "gateway.js"), String(nodePort), String(redisPort)]);
  await waitFor(httpPort);
  await waitFor(nodePort);
  const nginxPids = () => [nginx.pid, ...children(nginx.pid)];

  const setRps = (() => {
    const r = spawnSync("redis-benchmark", ["-p", String(redisPort), "-t", "set", "-n", smoke ? "50000" : "300000", "-c", String(cfg.conns), "-q"], { encoding: "utf8" });
    const m = /SET: ([\d.]+) requests per second/.exec(r.stdout);
    return m ? Number(m[1]) : NaN;
  })();
  log(`redis-benchmark SET (${cfg.conns} clients): ${fmt(setRps)} req/s`);

  // 1. Uncontended throughput, distinct key per request.
  const lines = [
    { id: "none", name: "no lock (ceiling)", url: `http://127.0.0.1:${httpPort}/none`, server: nginxPids },
    { id: "core", name: "resty.dlock acquire+release", url: `http://127.0.0.1:${httpPort}/core`, server: nginxPids },
    { id: "dedup", name: "resty.dlock.gateway dedup", url: `http://127.0.0.1:${httpPort}/dedup`, server: nginxPids },
    { id: "idem", name: "resty.dlock.gateway idempotency, first requests", url: `http://127.0.0.1:${httpPort}/idem`, server: nginxPids },
    { id: "idem_replay", name: "resty.dlock.gateway idempotency, replays", url: `http://127.0.0.1:${httpPort}/idem-replay`, server: nginxPids },
    { id: "seed", name: "seed Lua: SET NX PX + EVAL", url: `http://127.0.0.1:${httpPort}/seed`, server: nginxPids },
    { id: "node", name: "Node.js node-redlock 5 + ioredis", url: `http://127.0.0.1:${nodePort}/`, server: () => [node.pid] },
  ];
  for (const l of lines) wrk(l.url, cfg.conns, 1); // warm-up: JIT, pools, scripts cached
  const runs = Object.fromEntries(lines.map((l) => [l.id, []]));
  for (let round = 0; round < cfg.rounds; round++) {
    for (const l of lines) {
      const pidsNow = [...l.server(), redis.pid];
      const c0 = redisCalls(redisPort), t0 = cpuSeconds(pidsNow);
      const w = wrk(l.url, cfg.conns, cfg.seconds);
      await quiet(redisPort); // queued log-phase releases land in this line's numbers, not the next one's
      const c1 = redisCalls(redisPort), t1 = cpuSeconds(pidsNow);
      runs[l.id].push({ ...w, cmdsPerReq: (c1 - c0) / w.requests, cpuMsPer1k: ((t1 - t0) * 1e6) / w.requests });
      log(`  round ${round + 1} ${l.name}: ${fmt(w.rps)} req/s p50 ${fmt(w.p50, 2)} ms p99 ${fmt(w.p99, 2)} ms, errors ${w.errors}`);
    }
  }
  const ceiling = median(runs.none.map((r) => r.rps));
  const throughput = lines.map((l) => {
    const rs = runs[l.id];
    const rps = median(rs.map((r) => r.rps));
    return {
      line: l.name, id: l.id, rps, vs_ceiling: rps / ceiling, vs_redis_set: rps / setRps,
      p50_ms: median(rs.map((r) => r.p50)), p99_ms: median(rs.map((r) => r.p99)),
      redis_cmds_per_req: median(rs.map((r) => r.cmdsPerReq)), cpu_ms_per_1k: median(rs.map((r) => r.cpuMsPer1k)),
      errors: rs.reduce((a, r) => a + r.errors, 0),
    };
  });

  // 2. Contention: C clients on one key, each holding it h ms.
  const contLines = [
    { id: "dlock", name: "resty.dlock wait (backoff 2..64 ms, jitter)", path: "/contend/dlock" },
    { id: "poll", name: "polling lock, lua-resty-lock schedule (1 ms doubling to 500 ms)", path: "/contend/poll" },
  ];
  const cruns = Object.fromEntries(contLines.map((l) => [l.id, []]));
  for (let round = 0; round < cfg.rounds; round++) {
    for (const l of contLines) {
      await get(httpPort, "/gaps");
      const c0 = redisCalls(redisPort);
      wrk(`http://127.0.0.1:${httpPort}${l.path}?h=${cfg.hold}`, cfg.contendClients, cfg.contendSeconds);
      await new Promise((r) => setTimeout(r, 1500)); // waiters cut off by wrk give up (client abort)
      const c1 = redisCalls(redisPort);
      const nums = (await get(httpPort, "/gaps")).body.trim().split(/\s+/).map(Number);
      const acq = nums[0], gaps = nums.slice(1).map((us) => us / 1000);
      cruns[l.id].push({ acqPerSec: acq / cfg.contendSeconds, p50: pct(gaps, 50), p99: pct(gaps, 99), cmdsPerAcq: (c1 - c0) / acq });
      log(`  round ${round + 1} ${l.name}: ${fmt(acq / cfg.contendSeconds)} acq/s, hand-off p50 ${fmt(pct(gaps, 50), 2)} ms p99 ${fmt(pct(gaps, 99), 2)} ms`);
    }
  }
  const contention = contLines.map((l) => {
    const rs = cruns[l.id];
    return {
      line: l.name, id: l.id, clients: cfg.contendClients, hold_ms: cfg.hold,
      acq_per_sec: median(rs.map((r) => r.acqPerSec)), ideal_acq_per_sec: 1000 / cfg.hold,
      handoff_p50_ms: median(rs.map((r) => r.p50)), handoff_p99_ms: median(rs.map((r) => r.p99)),
      redis_cmds_per_acq: median(rs.map((r) => r.cmdsPerAcq)),
    };
  });

  // 3. Memory.
  const dictBytes = Number((await get(httpPort, `/dictmem?n=${cfg.dictLeases}`)).body);
  const memBefore = Number((await get(httpPort, "/mem")).body);
  let served = 0;
  while (served < cfg.memRequests) served += wrk(`http://127.0.0.1:${httpPort}/core`, cfg.conns, smoke ? 2 : 20).requests;
  const memAfter = Number((await get(httpPort, "/mem")).body);
  const memory = { dict_bytes_per_lease: dictBytes, leases_measured: cfg.dictLeases, requests: served, lua_kb_before: memBefore, lua_kb_after: memAfter };

  const result = {
    when: new Date().toISOString(), smoke, config: cfg,
    machine: { cpus: os.cpus().length, redis: execFileSync("redis-server", ["--version"], { encoding: "utf8" }).trim(),
      nginx: spawnSync(nginxBin, ["-v"], { encoding: "utf8" }).stderr.trim(), node: process.version },
    redis_set_rps: setRps, throughput, contention, memory,
  };
  report(result);
}

function report(r) {
  const t = [];
  t.push(`# make bench${r.smoke ? " (smoke: short, numbers indicative only)" : ""}`);
  t.push("");
  t.push(`${r.when}, ${r.machine.cpus} CPUs, ${r.machine.nginx}, ${r.machine.redis.split(" ").slice(0, 3).join(" ")}, Node ${r.machine.node}.`);
  t.push(`Medians of ${r.config.rounds} interleaved round(s). One nginx worker, one Node process, one redis-server, wrk on loopback.`);
  t.push("");
  t.push(`## 1. Uncontended: acquire + release around a trivial handler, distinct key per request (${r.config.conns} connections)`);
  t.push("");
  t.push(`Physical ceiling: redis-benchmark SET = ${fmt(r.redis_set_rps)} req/s (a lock needs two round trips: acquire and release).`);
  t.push("");
  t.push("| line | req/s | vs no lock | vs Redis SET | p50 ms | p99 ms | Redis cmds/req | CPU ms / 1000 req (server + redis) | errors |");
  t.push("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
  for (const l of r.throughput) {
    t.push(`| ${l.line} | ${fmt(l.rps)} | ${fmt(l.vs_ceiling, 2)} | ${fmt(l.vs_redis_set, 2)} | ${fmt(l.p50_ms, 2)} | ${fmt(l.p99_ms, 2)} | ${fmt(l.redis_cmds_per_req, 2)} | ${fmt(l.cpu_ms_per_1k, 1)} | ${l.errors} |`);
  }
  const core = r.throughput.find((l) => l.id === "core"), seed = r.throughput.find((l) => l.id === "seed"), nodeL = r.throughput.find((l) => l.id === "node");
  t.push("");
  t.push(`resty.dlock / seed Lua = ${fmt(core.rps / seed.rps, 2)}; resty.dlock / node-redlock = ${fmt(core.rps / nodeL.rps, 2)}.`);
  t.push("");
  t.push(`## 2. Contention: ${r.contention[0].clients} clients on one key, each holding it ${r.contention[0].hold_ms} ms`);
  t.push("");
  t.push(`At most ${fmt(r.contention[0].ideal_acq_per_sec)} acquisitions/s are possible (hold time alone).`);
  t.push("");
  t.push("| line | acquisitions/s | of ideal | hand-off p50 ms | hand-off p99 ms | Redis cmds/acquisition |");
  t.push("| --- | ---: | ---: | ---: | ---: | ---: |");
  for (const l of r.contention) {
    t.push(`| ${l.line} | ${fmt(l.acq_per_sec)} | ${fmt(l.acq_per_sec / l.ideal_acq_per_sec, 2)} | ${fmt(l.handoff_p50_ms, 2)} | ${fmt(l.handoff_p99_ms, 2)} | ${fmt(l.redis_cmds_per_acq, 1)} |`);
  }
  t.push("");
  t.push("## 3. Memory");
  t.push("");
  t.push(`- shared dict: ${fmt(r.memory.dict_bytes_per_lease)} bytes per held lease (${r.memory.leases_measured} leases held at once).`);
  t.push(`- worker Lua heap after a full GC: ${fmt(r.memory.lua_kb_before)} KB before, ${fmt(r.memory.lua_kb_after)} KB after ${r.memory.requests} more acquire+release requests.`);
  const md = t.join("\n") + "\n";
  console.log("\n" + md);
  fs.mkdirSync(outDir, { recursive: true });
  const base = r.smoke ? "smoke" : "latest";
  fs.writeFileSync(path.join(outDir, base + ".md"), md);
  fs.writeFileSync(path.join(outDir, base + ".json"), JSON.stringify(r, null, 2) + "\n");
  if (!r.smoke) plot(r);
}

function plot(r) {
  const dat = path.join(prefix, "plot.dat");
  fs.writeFileSync(dat, r.throughput.map((l) => `"${l.line}" ${l.rps} ${l.p99_ms}`).join("\n") + "\n");
  const cdat = path.join(prefix, "contend.dat");
  fs.writeFileSync(cdat, r.contention.map((l) => `"${l.id}" ${l.handoff_p50_ms} ${l.handoff_p99_ms} ${l.acq_per_sec}`).join("\n") + "\n");
  const gp = `
set terminal pngcairo size 900,450 font ",10"
set output "${path.join(outDir, "throughput.png")}"
set title "Uncontended lock + trivial handler (req/s, higher is better)"
set style data histograms
set style fill solid 0.8
set boxwidth 0.7
set xtics rotate by -20
set yrange [0:*]
set grid ytics
plot "${dat}" using 2:xtic(1) notitle linecolor rgb "#3b75af"
set output "${path.join(outDir, "handoff.png")}"
set title "Contention: hand-off gap, release to next holder (ms, lower is better)"
set xtics norotate
plot "${cdat}" using 2:xtic(1) title "p50" linecolor rgb "#3b75af", "" using 3 title "p99" linecolor rgb "#e1812c"
`;
  const g = spawnSync("gnuplot", [], { input: gp, encoding: "utf8" });
  if (g.status !== 0) console.error("gnuplot failed:", g.stderr);
}

// The servers we spawned keep the event loop alive: exit explicitly (the exit hook stops them).
main().then(() => process.exit(0), (e) => {
  console.error(e);
  process.exit(1);
});
