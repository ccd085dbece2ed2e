// make bench's options (--smoke, --only, --before), the configuration they
// give, and the helpers every section's numbers and lines go through.
"use strict";
const path = require("node:path");

const root = path.resolve(__dirname, "..", "..");
const smoke = process.argv.includes("--smoke");
// --only S (repeatable): only the lines whose id or name contains one of them (a
// section without one is skipped with what it needs started; 1b's ratios need the
// core line: --only core --only Cluster); results in bench/results/only.{md,json}.
const only = process.argv.filter((a, i, all) => all[i - 1] === "--only");
if (process.argv[process.argv.length - 1] === "--only") throw new Error("--only needs a substring of a line's id or name");
// --before REV: the old revision line core_before runs /core on (issue 22's measure is against it).
// In --smoke too: it adds about 2.5 s (its nginx up in well under a second, a 1 s warm-up, one 1 s round).
const BEFORE_DEFAULT = "b357923"; // the last commit before issue 22's work
const beforeAt = process.argv.indexOf("--before");
if (beforeAt >= 0 && !(process.argv[beforeAt + 1] || "").trim()) throw new Error("--before needs a revision (a commit, tag or branch)");
const beforeRev = beforeAt >= 0 ? process.argv[beforeAt + 1] : BEFORE_DEFAULT;
// "=ID" names one line exactly (--only =core: the core line, not core_tls, core_cluster, ...).
const wanted = (l) => !only.length || only.some((o) => (o[0] === "=" ? l.id === o.slice(1) : l.id.includes(o) || l.name.includes(o)));
const cfg = smoke
  ? { rounds: 1, seconds: 1, conns: 32, contendClients: 40, contendSeconds: 2, memRequests: 20000, dictLeases: 2000 }
  : { rounds: 5, seconds: 5, conns: 50, contendClients: 40, contendSeconds: 6, memRequests: 1000000, dictLeases: 10000 };
// Section 2: every request acquires the one key (ttl, waiting at most wait ms), holds it hold ms, releases.
Object.assign(cfg, { contendHold: 20, contendTtl: 1000, contendWait: 3000, contendWarmup: 0.5 });
// Section 2b: the same clients on one key, rwReaders of the requests readers, each holding it rwHold ms.
Object.assign(cfg, { rwReaders: 0.9, rwHold: 5 });
const outDir = path.join(root, "bench", "results");

function log(...a) {
  console.log(...a);
}

const median = (xs) => {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN;
};
const fmt = (x, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : "-");

module.exports = { root, smoke, only, BEFORE_DEFAULT, beforeRev, wanted, cfg, outDir, log, median, fmt };
