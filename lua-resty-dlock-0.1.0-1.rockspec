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
      ["resty.dlock.compat"] = "dist/resty/dlock/compat.lua",
      ["resty.dlock.core.acquire"] = "dist/resty/dlock/core/acquire.lua",
      ["resty.dlock.core.batch"] = "dist/resty/dlock/core/batch.lua",
      ["resty.dlock.core.check"] = "dist/resty/dlock/core/check.lua",
      ["resty.dlock.core.lease"] = "dist/resty/dlock/core/lease.lua",
      ["resty.dlock.core.ledger"] = "dist/resty/dlock/core/ledger.lua",
      ["resty.dlock.core.loop"] = "dist/resty/dlock/core/loop.lua",
      ["resty.dlock.core.meter"] = "dist/resty/dlock/core/meter.lua",
      ["resty.dlock.core.multi"] = "dist/resty/dlock/core/multi.lua",
      ["resty.dlock.core.multilease"] = "dist/resty/dlock/core/multilease.lua",
      ["resty.dlock.core.options"] = "dist/resty/dlock/core/options.lua",
      ["resty.dlock.core.orphans"] = "dist/resty/dlock/core/orphans.lua",
      ["resty.dlock.core.queued"] = "dist/resty/dlock/core/queued.lua",
      ["resty.dlock.core.rate"] = "dist/resty/dlock/core/rate.lua",
      ["resty.dlock.core.recovery"] = "dist/resty/dlock/core/recovery.lua",
      ["resty.dlock.core.reentrant"] = "dist/resty/dlock/core/reentrant.lua",
      ["resty.dlock.core.retry"] = "dist/resty/dlock/core/retry.lua",
      ["resty.dlock.core.schema"] = "dist/resty/dlock/core/schema.lua",
      ["resty.dlock.core.schema.modes"] = "dist/resty/dlock/core/schema/modes.lua",
      ["resty.dlock.core.schema.values"] = "dist/resty/dlock/core/schema/values.lua",
      ["resty.dlock.core.settle"] = "dist/resty/dlock/core/settle.lua",
      ["resty.dlock.core.subscriptions"] = "dist/resty/dlock/core/subscriptions.lua",
      ["resty.dlock.core.token"] = "dist/resty/dlock/core/token.lua",
      ["resty.dlock.core.wait"] = "dist/resty/dlock/core/wait.lua",
      ["resty.dlock.core.wakeups"] = "dist/resty/dlock/core/wakeups.lua",
      ["resty.dlock.core.watchdog"] = "dist/resty/dlock/core/watchdog.lua",
      ["resty.dlock.core.with"] = "dist/resty/dlock/core/with.lua",
      ["resty.dlock.gateway"] = "dist/resty/dlock/gateway.lua",
      ["resty.dlock.gateway.common"] = "dist/resty/dlock/gateway/common.lua",
      ["resty.dlock.gateway.guard"] = "dist/resty/dlock/gateway/guard.lua",
      ["resty.dlock.gateway.idempotency"] = "dist/resty/dlock/gateway/idempotency.lua",
      ["resty.dlock.gateway.idempotency.answers"] = "dist/resty/dlock/gateway/idempotency/answers.lua",
      ["resty.dlock.gateway.idempotency.capture"] = "dist/resty/dlock/gateway/idempotency/capture.lua",
      ["resty.dlock.gateway.idempotency.claim"] = "dist/resty/dlock/gateway/idempotency/claim.lua",
      ["resty.dlock.gateway.idempotency.options"] = "dist/resty/dlock/gateway/idempotency/options.lua",
      ["resty.dlock.gateway.inflight"] = "dist/resty/dlock/gateway/inflight.lua",
      ["resty.dlock.gateway.key"] = "dist/resty/dlock/gateway/key.lua",
      ["resty.dlock.gateway.lock_local"] = "dist/resty/dlock/gateway/lock_local.lua",
      ["resty.dlock.gateway.options"] = "dist/resty/dlock/gateway/options.lua",
      ["resty.dlock.gateway.rate"] = "dist/resty/dlock/gateway/rate.lua",
      ["resty.dlock.gateway.rate_local"] = "dist/resty/dlock/gateway/rate_local.lua",
      ["resty.dlock.gateway.releases"] = "dist/resty/dlock/gateway/releases.lua",
      ["resty.dlock.gateway.renewals"] = "dist/resty/dlock/gateway/renewals.lua",
      ["resty.dlock.gateway.request"] = "dist/resty/dlock/gateway/request.lua",
      ["resty.dlock.gateway.stats"] = "dist/resty/dlock/gateway/stats.lua",
      ["resty.dlock.rate"] = "dist/resty/dlock/rate.lua",
      ["resty.dlock.redis.backend"] = "dist/resty/dlock/redis/backend.lua",
      ["resty.dlock.redis.client"] = "dist/resty/dlock/redis/client.lua",
      ["resty.dlock.redis.cluster"] = "dist/resty/dlock/redis/cluster.lua",
      ["resty.dlock.redis.command"] = "dist/resty/dlock/redis/command.lua",
      ["resty.dlock.redis.connection"] = "dist/resty/dlock/redis/connection.lua",
      ["resty.dlock.redis.eviction"] = "dist/resty/dlock/redis/eviction.lua",
      ["resty.dlock.redis.lanes"] = "dist/resty/dlock/redis/lanes.lua",
      ["resty.dlock.redis.majority"] = "dist/resty/dlock/redis/majority.lua",
      ["resty.dlock.redis.multiquorum"] = "dist/resty/dlock/redis/multiquorum.lua",
      ["resty.dlock.redis.multiscripts"] = "dist/resty/dlock/redis/multiscripts.lua",
      ["resty.dlock.redis.pipeline"] = "dist/resty/dlock/redis/pipeline.lua",
      ["resty.dlock.redis.quorum"] = "dist/resty/dlock/redis/quorum.lua",
      ["resty.dlock.redis.records"] = "dist/resty/dlock/redis/records.lua",
      ["resty.dlock.redis.resp"] = "dist/resty/dlock/redis/resp.lua",
      ["resty.dlock.redis.roundtrip"] = "dist/resty/dlock/redis/roundtrip.lua",
      ["resty.dlock.redis.rwscripts"] = "dist/resty/dlock/redis/rwscripts.lua",
      ["resty.dlock.redis.script"] = "dist/resty/dlock/redis/script.lua",
      ["resty.dlock.redis.scripts"] = "dist/resty/dlock/redis/scripts.lua",
      ["resty.dlock.redis.sentinel"] = "dist/resty/dlock/redis/sentinel.lua",
      ["resty.dlock.redis.setup"] = "dist/resty/dlock/redis/setup.lua",
      ["resty.dlock.redis.single"] = "dist/resty/dlock/redis/single.lua",
      ["resty.dlock.redis.slotmap"] = "dist/resty/dlock/redis/slotmap.lua",
      ["resty.dlock.redis.subscriber"] = "dist/resty/dlock/redis/subscriber.lua",
      ["resty.dlock.redis.takeback"] = "dist/resty/dlock/redis/takeback.lua",
      ["resty.dlock.semaphore"] = "dist/resty/dlock/semaphore.lua",
      ["resty.dlock.status"] = "dist/resty/dlock/status.lua",
      ["resty.dlock.status.common"] = "dist/resty/dlock/status/common.lua",
      ["resty.dlock.status.exposition"] = "dist/resty/dlock/status/exposition.lua",
      ["resty.dlock.status.json"] = "dist/resty/dlock/status/json.lua",
      ["resty.dlock.version"] = "dist/resty/dlock/version.lua",
   },
}
