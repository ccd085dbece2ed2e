// Section 3: the shared dict's bytes per held lease, and the worker's Lua heap
// before and after cfg.memRequests more acquire+release requests.
"use strict";
const { smoke, cfg } = require("./config");
const { get, wrk } = require("./http");

async function measureMemory(httpPort) {
  const dictBytes = Number((await get(httpPort, `/dictmem?n=${cfg.dictLeases}`)).body);
  const memBefore = Number((await get(httpPort, "/mem")).body);
  let served = 0;
  while (served < cfg.memRequests) served += wrk(`http://127.0.0.1:${httpPort}/core`, cfg.conns, smoke ? 2 : 20).requests;
  const memAfter = Number((await get(httpPort, "/mem")).body);
  return { dict_bytes_per_lease: dictBytes, leases_measured: cfg.dictLeases, requests: served, lua_kb_before: memBefore, lua_kb_after: memAfter };
}

module.exports = { measureMemory };
