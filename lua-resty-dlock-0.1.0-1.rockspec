-- LuaRocks: `luarocks make` in a checkout installs dist/ (the Lua that
-- TypeScriptToLua emitted from src/; no build step, no C). Every module of
-- dist/ is listed: spec/packaging_spec.lua fails when one is missing.
rockspec_format = "3.0"
package = "lua-resty-dlock"
version = "0.1.0-1"
source = {
   url = "git+https://github.com/lua-resty-dlock/lua-resty-dlock.git",
   tag = "v0.1.0",
}
description = {
   summary = "Distributed lock for OpenResty/nginx on Redis",
   detailed = [[
      Owner-checked leases with unguessable tokens, fencing, renewal by a
      watchdog, semaphores, and request guards for nginx.conf (dedup,
      concurrency, throttle, mutex, idempotency keys), over standalone Redis,
      Sentinel, Cluster or Redlock. Status and Prometheus metrics endpoints.
   ]],
   homepage = "https://github.com/lua-resty-dlock/lua-resty-dlock",
   license = "BSD-2-Clause",
}
-- lua-resty-redis, lua-resty-core and lua-cjson come with OpenResty (Debian:
-- lua-nginx-redis, lua-resty-core, lua-cjson); listing them would install a
-- second copy beside the one nginx already loads.
dependencies = {
   "lua >= 5.1",
}
build = {
   type = "builtin",
   modules = {
      ["resty.dlock"] = "dist/resty/dlock.lua",
      ["resty.dlock.acquire"] = "dist/resty/dlock/acquire.lua",
      ["resty.dlock.backend"] = "dist/resty/dlock/backend.lua",
      ["resty.dlock.backend.cluster"] = "dist/resty/dlock/backend/cluster.lua",
      ["resty.dlock.backend.pipeline"] = "dist/resty/dlock/backend/pipeline.lua",
      ["resty.dlock.backend.quorum"] = "dist/resty/dlock/backend/quorum.lua",
      ["resty.dlock.backend.single"] = "dist/resty/dlock/backend/single.lua",
      ["resty.dlock.check"] = "dist/resty/dlock/check.lua",
      ["resty.dlock.eviction"] = "dist/resty/dlock/eviction.lua",
      ["resty.dlock.gateway"] = "dist/resty/dlock/gateway.lua",
      ["resty.dlock.gateway.common"] = "dist/resty/dlock/gateway/common.lua",
      ["resty.dlock.gateway.idempotency"] = "dist/resty/dlock/gateway/idempotency.lua",
      ["resty.dlock.gateway.idempotency.answers"] = "dist/resty/dlock/gateway/idempotency/answers.lua",
      ["resty.dlock.gateway.idempotency.capture"] = "dist/resty/dlock/gateway/idempotency/capture.lua",
      ["resty.dlock.gateway.idempotency.claim"] = "dist/resty/dlock/gateway/idempotency/claim.lua",
      ["resty.dlock.gateway.idempotency.options"] = "dist/resty/dlock/gateway/idempotency/options.lua",
      ["resty.dlock.gateway.key"] = "dist/resty/dlock/gateway/key.lua",
      ["resty.dlock.inflight"] = "dist/resty/dlock/inflight.lua",
      ["resty.dlock.lease"] = "dist/resty/dlock/lease.lua",
      ["resty.dlock.ledger"] = "dist/resty/dlock/ledger.lua",
      ["resty.dlock.loop"] = "dist/resty/dlock/loop.lua",
      ["resty.dlock.meter"] = "dist/resty/dlock/meter.lua",
      ["resty.dlock.orphans"] = "dist/resty/dlock/orphans.lua",
      ["resty.dlock.recovery"] = "dist/resty/dlock/recovery.lua",
      ["resty.dlock.redis"] = "dist/resty/dlock/redis.lua",
      ["resty.dlock.redis.setup"] = "dist/resty/dlock/redis/setup.lua",
      ["resty.dlock.reentrant"] = "dist/resty/dlock/reentrant.lua",
      ["resty.dlock.request"] = "dist/resty/dlock/request.lua",
      ["resty.dlock.resp"] = "dist/resty/dlock/resp.lua",
      ["resty.dlock.schema"] = "dist/resty/dlock/schema.lua",
      ["resty.dlock.scripts"] = "dist/resty/dlock/scripts.lua",
      ["resty.dlock.semaphore"] = "dist/resty/dlock/semaphore.lua",
      ["resty.dlock.sentinel"] = "dist/resty/dlock/sentinel.lua",
      ["resty.dlock.stats"] = "dist/resty/dlock/stats.lua",
      ["resty.dlock.status"] = "dist/resty/dlock/status.lua",
      ["resty.dlock.status.common"] = "dist/resty/dlock/status/common.lua",
      ["resty.dlock.status.exposition"] = "dist/resty/dlock/status/exposition.lua",
      ["resty.dlock.status.json"] = "dist/resty/dlock/status/json.lua",
      ["resty.dlock.subscriber"] = "dist/resty/dlock/subscriber.lua",
      ["resty.dlock.subscriptions"] = "dist/resty/dlock/subscriptions.lua",
      ["resty.dlock.token"] = "dist/resty/dlock/token.lua",
      ["resty.dlock.version"] = "dist/resty/dlock/version.lua",
      ["resty.dlock.wait"] = "dist/resty/dlock/wait.lua",
      ["resty.dlock.wakeups"] = "dist/resty/dlock/wakeups.lua",
      ["resty.dlock.watchdog"] = "dist/resty/dlock/watchdog.lua",
   },
}
