// The rate rows: offered load at a multiple of one limit, on both nginx, for
// each scheme of the row (nginx/torture.conf /rate/<scheme>, bench/torture_rate.lua);
// the witness Redis holds every admission's time. Checked: in any span of the
// run, admissions per key against burst + rate x span / period. The Redis-down
// row pauses the lock Redis under the on_error = "local" guard and measures
// what was admitted locally, the latency once the breaker is open, and how long
// after Redis returns the guard decides on Redis again.
"use strict";
const http = require("node:http");
const { sleep, once } = require("../lib");
const { WITNESS_PORT, HTTP_PORTS, log, procs, lockRedis } = require("./ctx");

const agent = new http.Agent({ keepAlive: true, maxSockets: 400 });

function get(port, p, timeoutMs = 5000) {
  return new Promise((resolve) => {
    const t = process.hrtime.bigint();
    const req = http.get({ host: "127.0.0.1", port, path: p, agent }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode, body, headers: res.headers, ms: Number(process.hrtime.bigint() - t) / 1e6 }));
      res.on("error", (e) => resolve({ error: e.code || e.message }));
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error("client timeout")));
    req.on("error", (e) => resolve({ error: e.code || e.message }));
  });
}

/** The guard's row of /dlock/status on one nginx. */
async function guardRow(port, name) {
  const r = await get(port, "/dlock/status", 2000);
  if (r.error || r.status !== 200) return null;
  return JSON.parse(r.body).guards[name] || null;
}

const pct = (xs, p) => {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const r2 = (x) => (x === null || x === undefined ? null : Math.round(x * 100) / 100);

/**
 * Open loop: per scheme and key, a request every period / (rate x offered) ms,
 * alternating the two nginx, whatever the answers; until stop(). samples: one
 * per request { scheme, key, sentMs (epoch), port, status, ms }.
 */
function startRateLoad(run, L, R, samples) {
  // bursts: the same average, sent burst requests at once (a client that spends its quota in bursts).
  const size = L.burst || 1;
  const every = (R.period * size) / (R.rate * L.offered);
  let stopping = false;
  const pending = [];
  const loops = [];
  for (const scheme of L.schemes) {
    for (let k = 1; k <= L.keys; k++) {
      const key = "r" + k;
      loops.push((async () => {
        const t0 = Date.now() + Math.random() * every;
        for (let i = 0; !stopping; i++) {
          const due = t0 + i * every;
          const wait = due - Date.now();
          if (wait > 0) await sleep(wait);
          for (let j = 0; j < size; j++) {
            const port = HTTP_PORTS[(i * size + j) % HTTP_PORTS.length];
            const sentMs = Date.now();
            pending.push(get(port, `/rate/${scheme}?run=${run}&key=${key}`).then((r) => {
              samples.push({ scheme, key, sentMs, port, status: r.error ? 0 : r.status, ms: r.ms, error: r.error, body: r.body });
            }));
          }
        }
      })());
    }
  }
  return async () => {
    stopping = true;
    await Promise.all(loops);
    await Promise.all(pending);
  };
}

/**
 * The witness's admissions of one key (times in us, sorted) checked against
 * burst + rate x span / period over every span between two admissions; slackMs
 * of each span allowed for the time between the decision and its record.
 * overAdmitted: the most admissions of any span beyond that bound (0: none).
 */
function exactness(times, R, slackMs) {
  const t = times.map(Number).sort((a, b) => a - b);
  let over = 0, overRaw = 0, maxPerPeriod = 0;
  for (let i = 0; i < t.length; i++) {
    for (let j = i; j < t.length; j++) {
      const n = j - i + 1;
      const spanMs = (t[j] - t[i]) / 1000;
      const ex = n - (R.burst + (R.rate * (spanMs + slackMs)) / R.period);
      if (ex > over) over = ex;
      const exRaw = n - (R.burst + (R.rate * spanMs) / R.period);
      if (exRaw > overRaw) overRaw = exRaw;
      if (spanMs < R.period && n > maxPerPeriod) maxPerPeriod = n;
    }
  }
  return { admitted: t.length, overAdmitted: Math.ceil(over - 1e-9), overRaw: Math.ceil(overRaw - 1e-9), maxPerPeriod, first: t[0], last: t[t.length - 1] };
}

async function witnessTimes(run, scheme, key) {
  return (await once(WITNESS_PORT, "LRANGE", `rate:${run}:${scheme}:${key}`, "0", "-1")) || [];
}

/** Per scheme: admissions, refusals, errors, and the exactness over its keys. */
async function schemeStats(run, sc, R, samples, loadMs) {
  const out = {};
  for (const scheme of sc.load.schemes) {
    const mine = samples.filter((s) => s.scheme === scheme);
    const st = { scheme, offered: mine.length, ok: 0, refused: 0, errors: 0, errMsgs: {}, keys: [] };
    for (const s of mine) {
      if (s.status === 200) st.ok++;
      else if (s.status === 429) st.refused++;
      else { st.errors++; const m = s.error || `${s.status} ${(s.body || "").trim().slice(0, 60)}`; st.errMsgs[m] = (st.errMsgs[m] || 0) + 1; }
    }
    for (let k = 1; k <= sc.load.keys; k++) {
      const e = exactness(await witnessTimes(run, scheme, "r" + k), R, sc.load.slackMs);
      st.keys.push({ key: "r" + k, ...e, bound: R.burst + (R.rate * loadMs) / R.period });
    }
    st.witnessed = st.keys.reduce((a, k) => a + k.admitted, 0);
    st.overAdmitted = Math.max(...st.keys.map((k) => k.overAdmitted));
    st.overRaw = Math.max(...st.keys.map((k) => k.overRaw));
    st.maxPerPeriod = Math.max(...st.keys.map((k) => k.maxPerPeriod));
    st.admittedPerKeyOfBound = Math.max(...st.keys.map((k) => k.admitted / k.bound));
    out[scheme] = st;
  }
  return out;
}

/** The Redis-down row's fault: pause the lock Redis, watch both nginx's breaker, continue, wait for it to close. */
async function redisDown(sc, R, fb) {
  const f = sc.fault;
  const ports = HTTP_PORTS;
  const openAt = ports.map(() => null);
  const at0 = await Promise.all(ports.map((p) => guardRow(p, R.fallbackGuard)));
  process.kill(lockRedis.pid, "SIGSTOP");
  procs.stopped.add(lockRedis.pid);
  fb.pausedAt = Date.now();
  while (Date.now() - fb.pausedAt < f.ms) {
    const rows = await Promise.all(ports.map((p) => guardRow(p, R.fallbackGuard)));
    rows.forEach((g, i) => { if (g && g.breaker !== "closed" && openAt[i] === null) openAt[i] = Date.now(); });
    await sleep(20);
  }
  process.kill(lockRedis.pid, "SIGCONT");
  procs.stopped.delete(lockRedis.pid);
  fb.resumedAt = Date.now();
  fb.openAt = openAt;
  const closedAt = ports.map(() => null);
  while (closedAt.some((c) => c === null) && Date.now() - fb.resumedAt < 10000) {
    const rows = await Promise.all(ports.map((p) => guardRow(p, R.fallbackGuard)));
    rows.forEach((g, i) => { if (g && g.breaker === "closed" && closedAt[i] === null) closedAt[i] = Date.now(); });
    await sleep(10);
  }
  fb.closedAt = closedAt;
  fb.backMs = closedAt.every((c) => c !== null) ? Math.max(...closedAt) - fb.resumedAt : null;
  fb.before = at0;
  f.at = fb.pausedAt;
  f.detail = `lock Redis pid ${lockRedis.pid} stopped ${fb.resumedAt - fb.pausedAt} ms`;
}

async function runRateRow(sc) {
  const R = sc.rate;
  const L = sc.load;
  const run = sc.id + "-" + Date.now();
  const started = Date.now();
  // The limit the harness assumes is the one nginx enforces (RateLimit-Policy of the guard).
  const probe = await get(HTTP_PORTS[0], `/rate/dlock?run=${run}-policy&key=p`);
  const want = `"${R.rate}-per-${R.period}ms";q=${R.rate};dlock-burst=${R.burst}`;
  if (probe.headers?.["ratelimit-policy"] !== want) {
    throw new Error(`nginx/torture.conf's rate guard says ${JSON.stringify(probe.headers?.["ratelimit-policy"])}, bench/torture-scenarios.js RATE ${want}`);
  }
  const samples = [];
  const fb = {};
  const f = sc.fault ? { kind: sc.fault.kind } : null;
  const t0 = Date.now();
  const stop = startRateLoad(run, L, R, samples);
  if (f) {
    await sleep(sc.fault.atMs);
    await redisDown({ ...sc, fault: { ...sc.fault } }, R, fb);
    Object.assign(f, { at: fb.pausedAt, detail: `lock Redis stopped ${fb.resumedAt - fb.pausedAt} ms` });
    const left = t0 + L.durationMs - Date.now();
    if (left > 0) await sleep(left);
  } else {
    await sleep(L.durationMs);
  }
  const loadEnd = Date.now();
  await stop();
  const loadMs = loadEnd - t0;
  const schemes = await schemeStats(run, sc, R, samples, loadMs);
  const row = {
    n: sc.n, id: sc.id, group: "rate", scenario: sc.title, promised: sc.promised, rate: R, load: L, loadMs, schemes,
    fault: f, wallMs: Date.now() - started,
  };
  if (f) {
    const fbStats = schemes.fallback;
    const rows = await Promise.all(HTTP_PORTS.map((p) => guardRow(p, R.fallbackGuard)));
    const delta = (ev) => rows.reduce((a, g, i) => a + ((g && g[ev]) || 0) - ((fb.before[i] && fb.before[i][ev]) || 0), 0);
    const localAdmitted = delta("local_admitted"), localRejected = delta("local_rejected");
    const outageMs = (fb.backMs === null ? loadEnd : fb.resumedAt + fb.backMs) - fb.pausedAt;
    // The status counters add up every key of the row: the bound is per key, times the keys.
    const localBound = L.keys * (R.fleetShareBurst + (R.rate * outageMs) / R.period);
    // Latency: requests answered before the pause (sent after a second of load: pools warm)
    // against those sent to an nginx after it reported its breaker open, until Redis came
    // back. Apart: the requests the pause caught before their nginx's breaker opened (in
    // flight, or sent meanwhile), each held up to the guard's read_timeout.
    const lat = (xs) => ({ n: xs.length, p50: r2(pct(xs, 50)), p99: r2(pct(xs, 99)), max: r2(pct(xs, 100)) });
    const mine = samples.filter((s) => s.scheme === "fallback" && s.status !== 0);
    const openOf = (s) => fb.openAt[HTTP_PORTS.indexOf(s.port)];
    const before = mine.filter((s) => s.sentMs >= t0 + 1000 && s.sentMs + s.ms < fb.pausedAt).map((s) => s.ms);
    const caught = mine.filter((s) => s.sentMs + s.ms >= fb.pausedAt && (openOf(s) === null || s.sentMs < openOf(s)) && s.sentMs < fb.resumedAt).map((s) => s.ms);
    const open = mine.filter((s) => openOf(s) !== null && s.sentMs >= openOf(s) && s.sentMs < fb.resumedAt).map((s) => s.ms);
    row.fallback = {
      pausedMs: fb.resumedAt - fb.pausedAt, openAfterMs: fb.openAt.map((o) => (o === null ? null : o - fb.pausedAt)),
      backMs: fb.backMs, cooldownMs: R.fallbackCooldown, outageMs, localAdmitted, localRejected, localBound,
      latencyBefore: lat(before), latencyCaught: lat(caught), latencyOpen: lat(open),
      addedP99: before.length && open.length ? r2(pct(open, 99) - pct(before, 99)) : null,
      witnessed: fbStats.witnessed,
    };
  }
  return row;
}

// ---- the report
const esc = (s) => String(s).replace(/\|/g, "\\|");

function rateIntro(rows) {
  const R = rows[0].rate;
  return [
    `Two nginx (2 workers each) share the lock Redis; one limit, **${R.rate} per ${R.period} ms with burst ${R.burst}**, enforced`,
    "by each scheme of a row on its own keys; clients offer a multiple of the limit per key (open loop: a request every",
    "period / (rate × offered) ms whatever the answers, alternating the two nginx; in a bursts row, that many requests",
    "at once, as often as keeps the same average). Every admission is written to the",
    "witness Redis with the wall-clock time taken right after the decision came back. **over-admission** = the most",
    `admissions of one key, over every span between two of its admissions, beyond burst + rate × span / period (${rows[0].load.slackMs} ms of each span allowed`,
    "for the time between a decision and its record; raw: none allowed). Schemes: `dlock` = mode \"rate\" (GCRA on Redis' clock);",
    "`fixed` = a fixed-window counter in Lua (INCR + PEXPIRE of the window's key on the same Redis, windows aligned to the",
    "clock: Kong's and APISIX's Redis scheme), `rate` per window; `local` = resty.limit.req's leaky bucket per nginx",
    "(nodelay), the same rate and burst in each nginx's shared dict (lua-resty-limit-traffic is not installed: its",
    "`incoming()` arithmetic written out in bench/torture_rate.lua); `fallback` = mode \"rate\" with `on_error = \"local\"`, `fleet = 2`.",
  ];
}

function rateTable(rows) {
  const out = [
    "| # | scenario | scheme | offered / admitted / refused / errors | admitted per key (max) vs bound over the run | most in one period (bound rate + burst) | over-admission (raw) | result |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
  ];
  for (const r of rows) {
    for (const st of Object.values(r.schemes)) {
      const k = st.keys.reduce((a, b) => (b.admitted > a.admitted ? b : a));
      out.push(`| ${r.n} | ${esc(r.scenario)} | ${st.scheme} | ${st.offered} / ${st.ok} / ${st.refused} / ${st.errors} | ${k.admitted} vs ${k.bound.toFixed(1)} | ${st.maxPerPeriod} (${r.rate.rate + r.rate.burst}) | ${st.overAdmitted} (${st.overRaw}) | ${st.result || r.result} |`);
    }
  }
  const fbRows = rows.filter((r) => r.fallback);
  if (fbRows.length) {
    out.push("");
    out.push("| # | Redis paused (ms) | breaker open after (ms, per nginx) | admitted locally / bound over the outage (all keys) | refused locally | latency p50 / p99 ms, Redis deciding | caught by the pause before the breaker opened: requests, max ms | latency p50 / p99 / max ms, breaker open | p99 added | back on Redis after it returned (ms; cooldown) | result |");
    out.push("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    for (const r of fbRows) {
      const b = r.fallback;
      out.push(`| ${r.n} | ${b.pausedMs} | ${b.openAfterMs.join(", ")} | ${b.localAdmitted} / ${b.localBound.toFixed(1)} | ${b.localRejected} | ${b.latencyBefore.p50} / ${b.latencyBefore.p99} | ${b.latencyCaught.n}, ${b.latencyCaught.max} | ${b.latencyOpen.p50} / ${b.latencyOpen.p99} / ${b.latencyOpen.max} | ${b.addedP99} | ${b.backMs} (${b.cooldownMs}) | ${r.result} |`);
    }
  }
  return out.join("\n");
}

/** Failures of a rate row (the exactness of the promised schemes; the fallback's bounds). */
function rateVerdict(r, fail) {
  for (const st of Object.values(r.schemes)) {
    if (st.witnessed !== st.ok) fail(r, `${st.scheme}: the witness holds ${st.witnessed} admissions, the clients saw ${st.ok}`);
    if (st.ok === 0) fail(r, `${st.scheme}: nothing admitted`);
    const promised = r.load.promised.includes(st.scheme);
    if (promised && st.errors > 0) fail(r, `${st.scheme}: ${st.errors} error(s) ${JSON.stringify(st.errMsgs)}`);
    if (promised && st.overAdmitted > 0) fail(r, `${st.scheme}: over-admitted by ${st.overAdmitted} in some span`);
    st.result = promised ? (st.overAdmitted > 0 ? "FAIL" : "ok") : (st.overAdmitted > 0 ? "reported" : "ok (not promised)");
  }
  const b = r.fallback;
  if (b) {
    if (b.backMs === null) fail(r, "the breaker never closed after Redis returned");
    else if (b.backMs > b.cooldownMs + 500) fail(r, `back on Redis ${b.backMs} ms after it returned (cooldown ${b.cooldownMs} ms)`);
    if (b.localAdmitted === 0) fail(r, "nothing admitted locally while Redis was paused");
    if (b.localAdmitted > b.localBound) fail(r, `${b.localAdmitted} admitted locally over the outage, bound ${b.localBound.toFixed(1)}`);
  }
}

module.exports = { runRateRow, rateIntro, rateTable, rateVerdict, exactness };
