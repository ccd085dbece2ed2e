-- Generated from src/resty/dlock/status.ts by TypeScriptToLua: edit that file, not this one.
-- resty.dlock.status: what this nginx instance holds and what its guards and factories did.
--
--   location = /dlock/status  { content_by_lua_block { require("resty.dlock.status").serve() } }
--   location = /dlock/metrics { content_by_lua_block { require("resty.dlock.status").metrics() } }
--
-- serve() answers JSON (GET /dlock/status?limit=N lists up to N leases, at most MAX_LIMIT):
--   { "held": [ {dict, key, pid, ttl, expires_at} ],   up to `limit` leases, never tokens
--     "held_listed": 3, "held_limit": 100, "held_truncated": false,
--     "held_total": 3,                                    every lease held now (counted, not listed)
--     "dicts": { "dlock": { "unrecorded_leases": 0 } },
--     "redis": { "127.0.0.1:6379": { "checked": true, "maxmemory_policy": "allkeys-lru", "maxmemory": 10485760,
--                                    "policy_evicts": true, "can_evict_locks": true, "checked_at": 1764000000.5,
--                                    "advice": "..." } },
--     "guards": { "<name>": { mode, breaker, in_flight, <events> } },
--     "factories": { "<name>": { held, acquired, busy, timeout, error, lost } } }
-- metrics() answers the same counters, the histograms of acquire wait and lease
-- hold time too, in the Prometheus text format (status/exposition.lua).
-- Both read the shared dicts of the guards and factories (and any dict named in `dicts`).
local _M = {}
local version = require("resty.dlock.version")
local json = require("resty.dlock.status.json")
local exposition = require("resty.dlock.status.exposition")
_M._VERSION = version.VERSION
_M.DEFAULT_LIMIT = json.DEFAULT_LIMIT
_M.MAX_LIMIT = json.MAX_LIMIT
_M.report = json.report
_M.serve = json.serve
_M.metrics_text = exposition.metrics_text
_M.metrics = exposition.metrics
return _M
