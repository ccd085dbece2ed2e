// Loopback ports: is anything listening, can we bind, a free one (cluster bus
// ports too), wait until one answers.
"use strict";
const net = require("node:net");
const { sleep } = require("./wait");

/** Something accepts connections on 127.0.0.1:port. */
function portOpen(port) {
  return new Promise((resolve) => {
    const s = net.createConnection({ host: "127.0.0.1", port });
    s.once("connect", () => { s.destroy(); resolve(true); });
    s.once("error", () => resolve(false));
  });
}

/** We could bind 127.0.0.1:port right now. */
function canListen(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

/** A port the kernel hands out (from the ephemeral range), free when asked. */
function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * Ports handed out by one harness, never twice. pick(): a free loopback port
 * below the ephemeral range (as nginx/lib.sh free_port), so no outgoing
 * connection takes it meanwhile. pick({ bus: true }): a cluster node's, whose bus
 * listens on port + 10000: both free, both below 32768.
 */
class Ports {
  constructor(taken = []) { this.used = new Set(taken); }
  take(...ports) { for (const p of ports) this.used.add(p); }
  async pick({ bus = false } = {}) {
    for (let i = 0; i < 1000; i++) {
      const p = 10000 + Math.floor(Math.random() * (bus ? 12000 : 22000));
      if (this.used.has(p) || (bus && this.used.has(p + 10000))) continue;
      if ((await portOpen(p)) || !(await canListen(p))) continue;
      if (bus && ((await portOpen(p + 10000)) || !(await canListen(p + 10000)))) continue;
      this.used.add(p);
      if (bus) this.used.add(p + 10000);
      return p;
    }
    throw new Error(bus ? "no free port pair (port, port + 10000) for a cluster node" : "no free port");
  }
}

/** Until something listens on port; throws after ms. */
async function waitPort(port, ms = 10000) {
  const end = Date.now() + ms;
  while (!(await portOpen(port))) {
    if (Date.now() > end) throw new Error(`nothing listens on 127.0.0.1:${port} after ${ms} ms`);
    await sleep(10);
  }
}

module.exports = { portOpen, canListen, freePort, Ports, waitPort };
