// A tiny RESP client: one connection, commands answered in order; once() for a
// single command on a connection of its own.
"use strict";
const net = require("node:net");

function encode(args) {
  let s = "*" + args.length + "\r\n";
  for (const a of args) {
    const b = Buffer.from(String(a));
    s += "$" + b.length + "\r\n" + b.toString("latin1") + "\r\n";
  }
  return Buffer.from(s, "latin1");
}

class RedisError extends Error {}

/** Parse one reply at pos; returns [value, next] or undefined when incomplete. */
function parseReply(buf, pos) {
  const eol = buf.indexOf("\r\n", pos, "latin1");
  if (eol < 0) return undefined;
  const t = String.fromCharCode(buf[pos]);
  const line = buf.toString("latin1", pos + 1, eol);
  const next = eol + 2;
  if (t === "+") return [line, next];
  if (t === "-") return [new RedisError(line), next];
  if (t === ":") return [Number(line), next];
  if (t === "$") {
    const n = Number(line);
    if (n < 0) return [null, next];
    if (buf.length < next + n + 2) return undefined;
    return [buf.toString("utf8", next, next + n), next + n + 2];
  }
  if (t === "*") {
    const n = Number(line);
    if (n < 0) return [null, next];
    const out = [];
    let p = next;
    for (let i = 0; i < n; i++) {
      const r = parseReply(buf, p);
      if (r === undefined) return undefined;
      out.push(r[0]);
      p = r[1];
    }
    return [out, p];
  }
  throw new Error("bad RESP type " + t);
}

/**
 * Server port → the local ports of our open connections to it, for the ports
 * passed to ownPorts(): a MONITOR there can leave the harness's own commands out.
 */
const own = new Map();
function ownPorts(port) {
  if (!own.has(port)) own.set(port, new Set());
  return own.get(port);
}

class Resp {
  static connect(port, timeoutMs = 2000) {
    return new Promise((resolve, reject) => {
      const sock = net.createConnection({ host: "127.0.0.1", port });
      const timer = setTimeout(() => { sock.destroy(); reject(new Error("connect timeout to " + port)); }, timeoutMs);
      sock.once("error", (e) => { clearTimeout(timer); reject(e); });
      sock.once("connect", () => {
        clearTimeout(timer);
        const mine = own.get(port);
        if (mine) {
          const lp = sock.localPort;
          mine.add(lp);
          sock.once("close", () => mine.delete(lp));
        }
        resolve(new Resp(sock));
      });
    });
  }
  constructor(sock) {
    this.sock = sock;
    this.buf = Buffer.alloc(0);
    this.waiting = [];
    sock.setNoDelay(true);
    sock.on("data", (d) => {
      this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
      let r;
      while (this.waiting.length && (r = parseReply(this.buf, 0)) !== undefined) {
        this.buf = this.buf.subarray(r[1]);
        const w = this.waiting.shift();
        if (r[0] instanceof RedisError) w.reject(r[0]); else w.resolve(r[0]);
      }
    });
    const fail = (e) => { for (const w of this.waiting.splice(0)) w.reject(e || new Error("redis connection closed")); };
    sock.on("error", fail);
    sock.on("close", () => fail());
  }
  cmd(...args) {
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this.sock.write(encode(args));
    });
  }
  close() { this.sock.destroy(); }
}

/** One command on a connection of its own. */
async function once(port, ...args) {
  const r = await Resp.connect(port);
  try { return await r.cmd(...args); } finally { r.close(); }
}

/** A flat [field, value, ...] reply as { field: Number(value) }. */
function hash(flat) {
  const o = {};
  for (let i = 0; i + 1 < flat.length; i += 2) o[flat[i]] = Number(flat[i + 1]);
  return o;
}

module.exports = { Resp, RedisError, once, ownPorts, hash, encode, parseReply };
