// What the topology rows' faults do and watch: a Sentinel failover (who names
// which master when), a Cluster slot moved under load.
"use strict";
const { sleep, once, addr, lineOf } = require("../lib");

/**
 * After a failover began (f.at): when the sentinels named another master, and,
 * for a graceful one, what became of the old master (its replicas, its role)
 * until the load ends (f.deadline).
 */
async function watchSentinel(topo, old, f, killed) {
  const w = { from: old, to: null, announcedMs: null, oldReplicasAtAnnounce: null, oldAloneMs: null, demotedMs: null, newReplicaMs: null,
    perSentinelMs: topo.sentinels.map(() => null) };
  while (Date.now() < f.deadline) {
    const now = () => Date.now() - f.at;
    // Each sentinel on its own: the others learn the new configuration from the
    // one that did the failover (hello messages), and until then name the old master.
    for (let i = 0; i < topo.sentinels.length; i++) {
      if (w.perSentinelMs[i] !== null) continue;
      const a = await once(topo.sentinels[i].port, "SENTINEL", "get-master-addr-by-name", topo.name).catch(() => null);
      if (a && Number(a[1]) !== old) {
        w.perSentinelMs[i] = now();
        if (w.to === null) { w.to = Number(a[1]); w.announcedMs = now(); }
      }
    }
    if (w.to !== null) {
      if (w.newReplicaMs === null) {
        const ni = await once(w.to, "INFO", "replication").catch(() => "");
        if (Number(lineOf(ni, "connected_slaves")) > 0) w.newReplicaMs = now();
      }
      if (!killed && w.demotedMs === null) {
        const oi = await once(old, "INFO", "replication").catch(() => "");
        const n = Number(lineOf(oi, "connected_slaves"));
        if (w.oldReplicasAtAnnounce === null) w.oldReplicasAtAnnounce = n;
        if (lineOf(oi, "role") === "slave") w.demotedMs = now();
        else if (n === 0 && w.oldAloneMs === null) w.oldAloneMs = now();
      }
      if (w.newReplicaMs !== null && (killed || w.demotedMs !== null) && !w.perSentinelMs.includes(null)) break;
    }
    await sleep(w.to === null ? 20 : 50);
  }
  const bits = [w.to === null ? "the sentinels named no new master before the load ended"
    : `the sentinels named ${addr(w.to)} at +${w.announcedMs} ms`];
  if (w.to !== null) {
    bits.push("each sentinel named it at " + w.perSentinelMs.map((x) => (x === null ? "(not by the end of the load)" : `+${x}`)).join(", ") + " ms");
    bits.push(w.newReplicaMs === null ? "it had no replica by the end of the load" : `it had a replica at +${w.newReplicaMs} ms`);
  }
  if (!killed && w.to !== null) {
    bits.push(`the old master had ${w.oldReplicasAtAnnounce} replica(s) then` + (w.oldAloneMs === null ? "" : `, none from +${w.oldAloneMs} ms`));
    bits.push(w.demotedMs === null ? "it was still a writable master when the load ended" : `it became a replica at +${w.demotedMs} ms`);
  }
  w.text = bits.join("; ");
  return w;
}

/** Move slot from src to dst ({ id, port } masters) under load; holdMs in migration at least. */
async function migrateSlot(masters, slot, src, dst, holdMs) {
  const t0 = Date.now();
  await once(dst.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id);
  await once(src.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id);
  let keys = 0, calls = 0;
  const moveAll = async () => {
    for (;;) {
      const batch = await once(src.port, "CLUSTER", "GETKEYSINSLOT", slot, 100);
      if (!batch.length) return;
      // MIGRATE copies each key with its value and its remaining ttl, then deletes it here, atomically.
      await once(src.port, "MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", ...batch);
      keys += batch.length;
      calls++;
    }
  };
  // The keys still here: scripts that find one of their keys but not the other
  // get TRYAGAIN, commands on missing keys ASK for the target.
  await sleep(holdMs / 2);
  await moveAll();
  // Every key on the target: everything is ASKed there until the slot is handed over.
  await sleep(holdMs / 2);
  await moveAll();
  await once(dst.port, "CLUSTER", "SETSLOT", slot, "NODE", dst.id);
  await once(src.port, "CLUSTER", "SETSLOT", slot, "NODE", dst.id);
  for (const m of masters) {
    if (m.port !== src.port && m.port !== dst.port) await once(m.port, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).catch(() => {});
  }
  return { slot, from: src.port, to: dst.port, keys, calls, ms: Date.now() - t0 };
}

module.exports = { watchSentinel, migrateSlot };
