#!/usr/bin/env node
// A DNS server for the specs, on UDP 127.0.0.1:PORT: answers A queries for the
// names given as NAME=IPv4 arguments (any case), "no such name" for the rest,
// and no records for other types (AAAA), as a cluster's DNS does for a service
// without IPv6. nginx resolves host names only through such a server (its
// resolver directive), never /etc/hosts.
// Usage: node spec/tools/dns.js PORT NAME=IP [NAME=IP ...]
"use strict";
const dgram = require("node:dgram");

const port = Number(process.argv[2]);
const names = new Map();
for (const arg of process.argv.slice(3)) {
  const [name, ip] = arg.split("=");
  names.set(name.toLowerCase().replace(/\.$/, ""), ip.split(".").map(Number));
}

/** The question's name, type and where the question ends. */
function question(msg) {
  const labels = [];
  let i = 12;
  while (msg[i] !== 0) {
    labels.push(msg.subarray(i + 1, i + 1 + msg[i]).toString("ascii"));
    i += msg[i] + 1;
  }
  return { name: labels.join(".").toLowerCase(), type: msg.readUInt16BE(i + 1), end: i + 5 };
}

const server = dgram.createSocket("udp4");
server.on("message", (msg, from) => {
  if (msg.length < 17) return;
  const q = question(msg);
  const ip = names.get(q.name);
  const header = Buffer.alloc(12);
  msg.copy(header, 0, 0, 2); // the id
  // A response, recursion desired and available as asked; rcode 3 (NXDOMAIN) for unknown names.
  header.writeUInt16BE(0x8180 | (ip ? 0 : 3), 2);
  header.writeUInt16BE(1, 4);
  const answer = ip && q.type === 1;
  header.writeUInt16BE(answer ? 1 : 0, 6);
  const parts = [header, msg.subarray(12, q.end)];
  if (answer) {
    const rr = Buffer.alloc(16);
    rr.writeUInt16BE(0xc00c, 0); // the question's name
    rr.writeUInt16BE(1, 2); // A
    rr.writeUInt16BE(1, 4); // IN
    rr.writeUInt32BE(5, 6); // ttl
    rr.writeUInt16BE(4, 10);
    Buffer.from(ip).copy(rr, 12);
    parts.push(rr);
  }
  server.send(Buffer.concat(parts), from.port, from.address);
});
server.bind(port, "127.0.0.1", () => console.log("dns on 127.0.0.1:" + port));
