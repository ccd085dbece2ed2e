// Reports: markdown tables, the machine a run was on, and the results files
// (bench/results/<base>.md and .json) written together.
"use strict";
const { spawnSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

/** A command's stdout and stderr, trimmed ("" when it is missing). */
function sh(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  return ((r.stdout || "") + (r.stderr || "")).trim();
}

/** What a run's numbers depend on. nginx: the binary that ran. */
function machine(nginx) {
  return {
    nproc: Number(sh("nproc", [])) || os.cpus().length,
    cpu: (os.cpus()[0] || {}).model || "?",
    memGiB: Math.round(os.totalmem() / 2 ** 30 * 10) / 10,
    kernel: os.release(),
    redis: sh("redis-server", ["--version"]),
    nginx: sh(nginx, ["-v"]),
    node: process.version,
  };
}

/** A cell's text with its pipes escaped. */
function esc(s) { return String(s).replace(/\|/g, "\\|"); }

/**
 * A markdown table. columns: [header, align ("l" | "r")]; rows: arrays of cells,
 * written as they are (esc() what may hold a pipe).
 */
function mdTable(columns, rows) {
  return [
    "| " + columns.map(([h]) => h).join(" | ") + " |",
    "| " + columns.map(([, a]) => (a === "r" ? "---:" : "---")).join(" | ") + " |",
    ...rows.map((cells) => "| " + cells.join(" | ") + " |"),
  ].join("\n");
}

/** dir/<base>.md and dir/<base>.json (pretty, newline at the end). */
function writeResults(dir, base, md, json) {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, base + ".md"), md);
  fs.writeFileSync(path.join(dir, base + ".json"), JSON.stringify(json, null, 2) + "\n");
}

module.exports = { sh, machine, esc, mdTable, writeResults };
