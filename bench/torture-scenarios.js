// The rows of make torture, as data. bench/torture.js runs them in this order
// (row number = position) and knows nothing about any single row: a row says
// what load runs, which fault is injected when, and what is promised.
//
//   load.kind "crit":    200 clients loop on /crit?key=K (5 keys) of both nginx;
//                        the critical section itself reports to the witness.
//   load.kind "gateway": clients loop on /gw/<guard>/<via>?g=<guard>&key=K&ms=N of
//                        both nginx (nginx/torture.conf); the backend nginx
//                        (nginx/torture-backend.conf) reports each request
//                        entering and leaving it, per key, to the witness.
//   topology:            (crit rows only) lock not on the lock Redis but on this
//                        Redis topology, one of TOPOLOGIES in bench/torture.js:
//                        started for the row with a pair of nginx pointed at it
//                        (`redis` below is /crit's option, beside what the harness
//                        fills in: sentinel nodes, cluster seeds, redlock masters).
//                        group "topology": run by --topologies and the full run.
//   fault:               one of FAULTS in bench/torture.js, with its parameters;
//                        atMs after the load starts (crit rows: 1 s short, 2 s full).
//   load.kind "contention": (group "contention": run by --contention and the full
//                        run, not by --short) clientsPerKey clients per key of
//                        `keys`, half on each nginx, each keeping to its key, loop
//                        on the phase's location (/crit, /crit-poll, /crit-abortable
//                        of nginx/torture.conf) for each of `phases` in turn;
//                        shortWait / abort: that share of the requests asks with a
//                        short random `wait` / is abandoned by its client. A phase
//                        with `leftovers` checks the lock Redis settleMs after the
//                        load: no lock key, no release channel subscribed. The
//                        row's fault hits the first phase. `goals` are reported
//                        (met / missed) for the resty.dlock phase, never failed.
//   load.sets:           (crit rows) each request takes a random one of these sets of
//                        keys with acquire_all (/crit?keys=A,B); load.keys then lists
//                        every key (what the witness reads, and a Cluster's spread),
//                        load.clients how many clients, load.noTimeouts fails the row
//                        on any wait timeout (the waits allow none: a deadlock would).
//   noneSeen:            (rows not promised) added to the note when the row saw no overlap.
//   outside:             (rows not promised) why, in a few words, for the report's footer.
//   set "rw":            the rows of shared (read-write) locks and the compat facade: run by
//                        --rw and the full run (the group decides their table).
//   promised:            the design promises exclusion: for crit rows no two
//                        holders inside at once; for gateway rows no more requests
//                        in flight at the backend per key than the guard promises
//                        (GUARDS[g].promise) and no key of a guard left locked
//                        once the load and the backend are done.
"use strict";

/**
 * The gateway guards of nginx/torture.conf and what each promises per key at the
 * backend. The harness checks these against the running nginx (GET /gw/guards).
 */
const GUARDS = {
  mutex: { name: "t_mutex", mode: "mutex", permits: 1, ttl: 1000, wait: 2000, promise: 1, refusal: 503 },
  conc: { name: "t_conc", mode: "concurrency", permits: 2, ttl: 1000, wait: 2000, promise: 2, refusal: 429 },
  dedup: { name: "t_dedup", mode: "dedup", permits: 1, ttl: 1000, wait: 0, promise: 1, refusal: 409 },
  // A mutex whose GETs and HEADs share the key: "rw" = GETs side by side, any other method alone.
  rw: { name: "t_rw", mode: "mutex", permits: 1, ttl: 1000, wait: 2000, promise: "rw", refusal: 503 },
  // The control location has no guard: nothing is promised, the witness must see overlaps.
  none: { name: null, mode: "none", permits: null, ttl: null, wait: 0, promise: 1, refusal: null },
};

/** How the request ends, per `via` (each guard has /gw/<guard>/<via> in nginx/torture.conf). */
const VIAS = {
  plain: "proxy_pass to the backend; the request ends where it came in",
  error_page: "`proxy_intercept_errors on; error_page 500 502 = @fallback;` (the backend answers 500 to some requests, @fallback proxies to it again)",
  dead_upstream: "`error_page 502 = @app;` in front of an upstream nothing listens on (@app proxies to the backend)",
  try_files: "`try_files $uri @app;` (no such file: @app proxies to the backend)",
  x_accel: "the backend answers `X-Accel-Redirect: /internal/work?...`; `location /internal/ { internal; proxy_pass ...; }`",
};

/**
 * The crit load (load.kind "crit"): CLIENTS keep-alive clients over both nginx
 * loop on /crit?key=K of `keys`, durationMs of load per row with the fault at
 * faultAtMs (--short or the full run). `lock` is what nginx/torture.conf's /crit
 * does (its dlock.new and acquire options, hold ms inside), as the report says it.
 */
const CRIT_LOAD = {
  clients: 200, keys: ["k1", "k2", "k3", "k4", "k5"], requestTimeoutMs: 15000,
  durationMs: { short: 3000, full: 8000 }, faultAtMs: { short: 1000, full: 2000 },
  lock: { ttl: 1000, wait: 3000, hold: 20, connect_timeout: 200, read_timeout: 300 },
};
const CRIT = { kind: "crit" };
/** The read-write rows: /crit-rw, this share of the requests readers (shared = true), the rest writers. */
const RW = { kind: "crit", path: "/crit-rw", readers: 0.85 };
/** acquire_all rows: every pair of m1..m4 in both orders; few enough clients that a 3 s wait never runs out but by a deadlock. */
const MULTI_KEYS = ["m1", "m2", "m3", "m4"];
const MULTI = {
  kind: "crit", clients: 16, keys: MULTI_KEYS, noTimeouts: true,
  sets: MULTI_KEYS.flatMap((a) => MULTI_KEYS.filter((b) => b !== a).map((b) => [a, b])),
};

// ---- the Redis topologies of the topology rows (bench/torture.js TOPOLOGIES starts them)
/**
 * A master, two replicas, three sentinels (quorum 2), as spec/sentinel_spec.lua
 * starts them. replicas = 1: an acquire (or extend) counts only once a replica
 * acknowledged it (WAIT 1 within 200 ms), else it is given back. Two replicas,
 * because right after a failover the new master has one replica left only if
 * there were two: with one, WAIT 1 fails on the new master until the old one
 * is reconfigured as its replica (about 11 s).
 */
const SENTINEL = {
  kind: "sentinel", master: "locks", replicas: 2, sentinels: 3, quorum: 2, downAfterMs: 1000, failoverTimeoutMs: 3000,
  redis: { replicas: 1, replicas_timeout: 200, connect_timeout: 200, read_timeout: 300 },
};
/**
 * redis-cli --cluster create: 3 masters with a replica each, cluster-node-timeout
 * 1 s; /crit gets the first 3 nodes as seeds. The 5 load keys (torture:k1..k5)
 * land on all three masters' slot ranges (the harness checks at least two).
 */
const CLUSTER = {
  kind: "cluster", masters: 3, replicasEach: 1, nodeTimeoutMs: 1000, seeds: 3,
  redis: { connect_timeout: 200, read_timeout: 300 },
};
/** Three independent masters, short timeouts as Redlock wants (each much shorter than the ttl); no fencing (refused). */
const REDLOCK = { kind: "redlock", masters: 3, fencing: false, redis: { connect_timeout: 50, read_timeout: 50 } };
const ALL = ["mutex", "conc", "dedup"];

/**
 * The rate rows' limit (nginx/torture.conf: guards t_rate and t_rate_fb, and the
 * baselines of bench/torture_rate.lua; checked against t_rate's RateLimit-Policy).
 * t_rate_fb: on_error = "local", fleet 2, breaker_failures 1, breaker_cooldown
 * 1000 ms, connect and read timeouts 100 ms; each nginx's share while Redis is
 * paused is rate / 2 per period and floor(burst / 2) at once.
 */
const RATE = { rate: 10, period: 500, burst: 5, fallbackGuard: "t_rate_fb", fallbackCooldown: 1000, fleetShareBurst: 2 * Math.floor(5 / 2) };

/** Gateway load defaults: 200 clients spread over both nginx, every guard of the row, `keys` keys per guard. */
function gw(o) {
  return {
    kind: "gateway", clients: 200, guards: ALL, keys: 3, backendMs: [50, 300], fail: 0, abort: null,
    durationMs: 4000, refusalPauseMs: [20, 80], ...o,
  };
}

const SCENARIOS = [
  // ---------------------------------------------------------------- the lock API (/crit)
  {
    id: "no-fault", title: "no fault", promised: true, short: true, load: CRIT, fault: null,
    about: "baseline; the gap is the release and the next waiter's wake-up (or, while its wake-up subscription is not live, its 2-64 ms polling backoff)",
  },
  {
    id: "redis-sigstop", title: "lock Redis SIGSTOP 1.5 s", promised: true, load: CRIT,
    fault: { kind: "redis-sigstop", ms: 1500 },
    about: "calls in flight hit read_timeout (300 ms) and fail as err; leases run out while Redis is paused",
  },
  {
    id: "redis-restart", title: "lock Redis restart, no persistence", promised: false, load: CRIT,
    fault: { kind: "redis-restart", persistence: "none" },
    outside: "Redis loses its data",
    noneSeen: `none seen here: the restart outlasted the ${CRIT_LOAD.lock.hold} ms critical section, so every holder had left before the fresh Redis granted anything`,
    about: "every lock vanishes with the restart: a holder still inside can be joined by a newcomer (not promised)",
  },
  {
    id: "redis-restart-aof", title: "lock Redis restart, appendfsync always", promised: true, load: CRIT,
    fault: { kind: "redis-restart", persistence: "aof" },
    about: "acknowledged locks are fsynced (SET ... PXAT in the AOF) and come back with the restart",
  },
  {
    id: "worker-kill", title: "nginx worker holding a lock SIGKILLed", promised: true, short: true, load: CRIT,
    fault: { kind: "worker-kill", instance: 1 },
    about: "the master respawns the worker, and the new worker's crash recovery (dlock.init_worker) releases the dead one's leases, owner-checked: the gap is the respawn and one round trip, not the ttl (1 s)",
  },
  {
    id: "reload", title: "nginx -s reload under load", promised: true, short: true, load: CRIT,
    fault: { kind: "reload", instance: 1 },
    about: "old workers finish their critical sections and release before they exit",
  },
  {
    id: "worker-sigstop", title: "nginx worker holding a lock SIGSTOP 2.5 s (> ttl)", promised: false, load: CRIT,
    fault: { kind: "worker-sigstop", instance: 1, ms: 2500 },
    outside: "a holder paused past its ttl",
    noneSeen: "none seen this time: the stopped worker's key was not taken over before it woke",
    about: "overlaps EXPECTED: the stopped holder's lease expired and the key went to someone else while it still believed it held the lock. A lease alone cannot protect against this; fencing can: the stalled holder's write carries an old fence and the witness refuses it (stale writes column)",
  },

  // ---------------------------------------------------------------- gateway guards (/gw/...)
  {
    id: "gw-control", title: "control: no guard in front of the backend", group: "gateway", promised: false,
    control: { plantLocks: ["mutex", "conc"] },
    load: gw({ guards: ["none"], via: "plain", clients: 20, keys: 2, backendMs: [50, 150], durationMs: 1500 }),
    fault: null,
    about: "checks the harness: without a guard the witness must count overlaps at the backend, and the scan must find the lock key and the permit planted in the lock Redis (as a leaked lease of t_mutex and t_conc would look)",
  },
  {
    id: "gw-error-page", title: "internal redirect: error_page 500 502 = @fallback, proxy_intercept_errors", group: "gateway", promised: true,
    load: gw({ via: "error_page", fail: 0.3 }),
    fault: null,
    about: "30 % of backend answers are 500 and go to @fallback (30 ms more at the backend, same key); the guard's log() is in the first location only",
  },
  {
    id: "gw-dead-upstream", title: "internal redirect: dead upstream, error_page 502 = @app", group: "gateway", promised: true,
    load: gw({ via: "dead_upstream" }),
    fault: null,
    about: "every request's primary upstream refuses the connection; @app serves it from the backend",
  },
  {
    id: "gw-try-files", title: "internal redirect: try_files $uri @app", group: "gateway", promised: true,
    load: gw({ via: "try_files" }),
    fault: null,
    about: "no static file matches: every request ends in @app",
  },
  {
    id: "gw-x-accel", title: "internal redirect: X-Accel-Redirect to an internal location", group: "gateway", promised: true,
    load: gw({ via: "x_accel" }),
    fault: null,
    about: "the backend routes every request to /internal/work (the work is counted there)",
  },
  {
    id: "gw-client-abort", title: "clients abort at random mid-request (backend 0.2-0.9 s < ttl)", group: "gateway", promised: true,
    load: gw({ via: "plain", backendMs: [200, 900], abort: { p: 0.5, atMs: [20, 1200] }, durationMs: 5000 }),
    fault: null,
    about: "half the requests are abandoned (socket destroyed) at a random moment; default nginx (proxy_ignore_client_abort off) answers 499 and cuts the upstream connection while the backend keeps working. Every backend request is shorter than the ttl, so a key kept until its lease runs out covers it",
  },
  {
    id: "gw-client-abort-long", title: "clients abort at random mid-request (backend 1.2-2 s > ttl)", group: "gateway", promised: false,
    load: gw({ via: "plain", backendMs: [1200, 2000], abort: { p: 0.5, atMs: [20, 1500] }, durationMs: 5000 }),
    fault: null,
    about: "as the row above, but the backend outlives the ttl: once the client is gone nothing tells the gateway when the backend is done, and a key kept only until its lease runs out no longer covers it (README: choose a ttl that covers the backend's own timeout). Reported, not failed",
  },
  {
    id: "gw-reload", title: "nginx -s reload under load, ttl 1 s < requests 1.5-3 s", group: "gateway", promised: true,
    load: gw({ via: "plain", keys: 6, backendMs: [1500, 3000], durationMs: 6000 }),
    fault: { kind: "reload", instance: 1, atMs: 2000 },
    about: "leases (ttl 1000 ms) are shorter than the backend requests: only renewal keeps them while the old workers finish",
  },
  {
    id: "gw-quit-restart", title: "nginx -s quit, then start again, under load, ttl 1 s < requests 1.5-3 s", group: "gateway", promised: true,
    load: gw({ via: "plain", keys: 6, backendMs: [1500, 3000], durationMs: 7000 }),
    fault: { kind: "quit-restart", instance: 1, atMs: 2000 },
    about: "instance 1 shuts down gracefully (its workers finish their requests), then starts again on its port; its clients go to instance 2 meanwhile",
  },

  // ---------------------------------------------------------------- Redis topologies (/crit on Sentinel, Cluster, Redlock)
  {
    id: "sentinel-failover", title: "Sentinel: SENTINEL FAILOVER under load (replicas = 1, 2 replicas)", group: "topology",
    promised: true, load: CRIT, topology: SENTINEL,
    fault: { kind: "sentinel-failover" },
    about: "promised: every lock handed out was on a replica too (WAIT 1), and the sentinels promote the replica with the largest replication offset; " +
      "the old master stays a writable master for about 11 s, but once the sentinels point the other replica at the new master it has no replica to acknowledge WAIT 1, " +
      "so acquires there are given back (\"only 0 of 1 replica(s) acknowledged\"), and new acquires reach the new master as soon as a worker asks the sentinels again (every second, and on READONLY). " +
      "What it rests on: a lock acknowledged only by the replica that is not promoted, in the moment before that replica follows the new master, is lost (it resyncs from the new master), and its holder could be joined by a newcomer there; " +
      "the row shows whether that window is hit (a release answering not_owner is such a lost lock: NEAR MISS in the note; an overlap fails the row). " +
      "The price is availability: acquisitions fail while the lock moves (the longest time with no acquisition at all)",
  },
  {
    id: "sentinel-master-kill", title: "Sentinel: master SIGKILLed under load (replicas = 1, 2 replicas)", group: "topology",
    promised: false, load: CRIT, topology: SENTINEL,
    fault: { kind: "sentinel-master-kill" },
    about: "not promised: replication is asynchronous and WAIT 1 says only that one replica has the lock; if the sentinels promote the other one, " +
      "a lock whose holder is still inside is gone and a newcomer can take it. (With 20 ms critical sections and a failover that takes at least " +
      "down-after-milliseconds, 1 s, every holder has left before the new master answers, so overlaps are unlikely here; a longer critical section, or a ttl longer than the failover, makes them possible.) " +
      "Shown: how long nothing can be locked (detection 1 s + election + the workers asking the sentinels again)",
  },
  {
    id: "cluster-migration", title: "Cluster: slots of load keys migrated under load (MOVED, ASK, TRYAGAIN)", group: "topology",
    promised: true, load: CRIT, topology: CLUSTER,
    fault: { kind: "cluster-migrate", slots: 2, holdMs: 800 },
    about: "promised: MIGRATE moves a lock key with its value and remaining ttl, atomically (the source is blocked while it copies and deletes), and while a slot migrates " +
      "each key is served by exactly one node: the source while the key is there, the target (ASK, then ASKING) once it is not; a script that finds one of its keys (the lock, its fence counter " +
      "in the same slot by hash tag) but not the other is answered TRYAGAIN and not run. No replica or failover is involved: nothing is lost, so two holders can never coexist. " +
      "The migrated keys cannot be acquired while their slot is in migration (TRYAGAIN): their gap is about the migration's length",
  },
  {
    id: "cluster-master-kill", title: "Cluster: a master SIGKILLed under load, its replica promoted", group: "topology",
    promised: false, load: CRIT, topology: CLUSTER,
    fault: { kind: "cluster-master-kill" },
    about: "not promised: a cluster replicates asynchronously (no WAIT here), so a lock written to the master just before it died may not be on the replica that takes over, " +
      "and a newcomer can take it while its holder is inside (unlikely with 20 ms sections and a failover of over a second, as above). With cluster-require-full-coverage (the default) " +
      "the whole cluster answers CLUSTERDOWN from the moment the master is marked failed until its replica is promoted (cluster-node-timeout 1 s + election); shown: that gap",
  },
  {
    id: "redlock-node-paused", title: "Redlock: 1 of 3 masters SIGSTOPped 1.5 s", group: "topology",
    promised: true, load: CRIT, topology: REDLOCK,
    fault: { kind: "redlock-node-sigstop", node: 1, ms: 1500 },
    about: "promised: a lock is a majority (2 of 3) taken within its validity (ttl − elapsed − drift allowance), and any two majorities share a master, which holds the key for one owner at a time; " +
      "the paused master costs each call its 50 ms read timeout, the other two still decide. Commands it received while paused run when it wakes up: an acquire whose caller gave up " +
      "may set the key there, but a key on one master never makes a majority, and it expires by the wall clock like the rest. Not covered (and not tested): a master restarted without its data " +
      "(the algorithm asks for a delayed restart) and clock jumps. No fencing: Redlock refuses it, fence counters on independent masters are not monotonic",
  },

  // ---------------------------------------------------------------- contention (many waiters per key, measured)
  {
    id: "contention", title: "contention: 40 waiters per key over both nginx, no fault", group: "contention", promised: true,
    load: {
      kind: "contention", keys: ["c1", "c2"], clientsPerKey: 40,
      phases: [
        { name: "resty.dlock (wake-ups)", path: "/crit", durationMs: 8000, leftovers: { settleMs: 3000, watchMs: 3000 } },
        { name: "polling baseline (SET NX, 2→64 ms backoff)", path: "/crit-poll", durationMs: 5000, baseline: true },
      ],
    },
    goals: { handoffP99Ms: 3, commandsPerAcquisition: 3 },
    fault: null,
    about: "2 keys × 40 clients (20 per nginx, 10 per worker), wait 3000 ms: the queue of a key drains in 40 × 20 ms = 0.8 s, well within the wait. " +
      "resty.dlock waits on the release channel (one subscriber connection per worker, one local waiter woken per message, the others of the worker queued behind it); " +
      "the baseline polls Redis",
  },
  {
    id: "waiters-give-up", title: "waiters give up: clients abort while waiting, short waits time out, a worker SIGKILLed", group: "contention", promised: true,
    load: {
      kind: "contention", keys: ["g1", "g2", "g3"], clientsPerKey: 30,
      shortWait: { p: 0.3, ms: [10, 300] }, abort: { p: 0.3, atMs: [5, 800] },
      phases: [
        { name: "resty.dlock (wake-ups)", path: "/crit-abortable", durationMs: 6000, leftovers: { settleMs: 3000, watchMs: 4000 }, probe: 8 },
      ],
    },
    fault: { kind: "worker-kill", instance: null, atMs: 3000 },
    about: "3 keys × 30 clients on /crit-abortable (lua_check_client_abort on): 30 % of the requests wait 10-300 ms only and time out; 30 % are abandoned by their client 5-800 ms in, " +
      "and a request still waiting then is ended where it waits (its abort handler calls ngx.exit(499), which kills the coroutine inside acquire(): no code of the library runs after that), " +
      "one that already holds the lock runs to its release; one worker (either nginx) SIGKILLed at 3 s. Promised: no overlap, and 3 s after the load nothing left in the lock Redis: " +
      "no lock key, no release channel anyone subscribes to (PUBSUB CHANNELS dlock:released:*, PUBSUB NUMSUB of the load keys' channels). " +
      "Then 8 requests per key one at a time: nobody waits any more, so each should take one acquire, 20 ms and a release",
  },

  // ---------------------------------------------------------------- shared and exclusive locks, the compat facade (issue 24)
  {
    id: "rw-no-fault", set: "rw", title: "read-write, 85 % readers, no fault", group: "rw", promised: true, short: true, load: RW, fault: null,
    about: "readers share a key, a writer has it alone; a waiting writer holds back the readers that come after it, so it gets in once the readers inside leave",
  },
  {
    id: "rw-reader-kill", set: "rw", title: "read-write: nginx worker holding a read lease SIGKILLed", group: "rw", promised: true, load: RW,
    fault: { kind: "worker-kill", instance: 1, reader: true },
    about: "the killed worker's read leases are given back by the new worker's crash recovery (owner-checked, the reader's entry only): the writers waiting behind it get in without waiting out the ttl",
  },
  {
    id: "rw-redis-sigstop", set: "rw", title: "read-write: lock Redis SIGSTOP 1.5 s", group: "rw", promised: true, load: RW,
    fault: { kind: "redis-sigstop", ms: 1500 },
    about: "calls in flight hit read_timeout (300 ms) and fail as err; read and write leases run out while Redis is paused",
  },
  {
    id: "rw-cluster", set: "rw", title: "read-write on a Redis Cluster, 85 % readers, no fault", group: "rw", promised: true, load: RW, topology: CLUSTER,
    fault: null,
    about: "the same load on a 3-master Cluster: the lock key, its readers and its line share the key's slot (hash tags)",
  },
  {
    id: "compat", set: "rw", title: "resty.dlock.compat (lua-resty-lock's API), an object per request", promised: true,
    load: { kind: "crit", path: "/crit-compat" }, fault: null,
    about: "/crit-compat: `local lock = resty_lock:new(\"dlock\", { exptime = 3, timeout = 3 })`, `lock:lock(key)`, 20 ms inside, `lock:unlock()`, as code written for lua-resty-lock does it, across the workers of both nginx (exptime 3 s: lua-resty-lock caps timeout at exptime, and /crit waits 3 s)",
  },
  {
    id: "gw-rw", set: "rw", title: "mutex guard whose GETs share (shared = { \"GET\", \"HEAD\" }), 85 % GETs", group: "gateway", promised: true,
    load: gw({ guards: ["rw"], via: "plain", gets: 0.85, clients: 60, keys: 2, backendMs: [20, 120], durationMs: 4000 }),
    fault: null,
    about: "GETs take the key as readers and reach the backend side by side; a POST takes it alone: never a POST beside anyone at the backend, never a GET beside a POST",
  },
  // ---------------------------------------------------------------- several keys (acquire_all)
  {
    id: "multikey", title: "acquire_all: sets of 2 of 4 keys, each pair in both orders, no fault", promised: true,
    load: MULTI, fault: null,
    about: `${MULTI.clients} clients each take a random set of 2 of m1..m4, in either order ({m1,m2} and {m2,m1} ...), with acquire_all (one script for the set; waiting, the keys in sorted order); every key of a set is witnessed; no wait may time out (a deadlock would)`,
  },
  {
    id: "cluster-multikey", title: "Cluster: acquire_all of keys on different masters, each pair in both orders", group: "topology",
    promised: true, load: MULTI, topology: CLUSTER, fault: null,
    about: "as the row above on a Cluster whose masters the keys spread over: each set is tried key by key in sorted order (the keys taken given back at the first busy one), then waited for in that order; no wait may time out",
  },
  // ---------------------------------------------------------------- rate limits (/rate/<scheme>, measured against baselines)
  {
    id: "rate-exact", title: "rate limit, 3x offered for 12 s: mode rate against a fixed window and a per-nginx leaky bucket", group: "rate",
    promised: true, rate: RATE,
    load: { kind: "rate", schemes: ["dlock", "fixed", "local"], promised: ["dlock"], keys: 3, offered: 3, durationMs: 12000, slackMs: 20 },
    fault: null,
    about: "3 keys per scheme, each offered 3x the limit (60 requests/s per key) over both nginx for 24 periods. Promised for mode rate only: " +
      "no span of the run admits more than burst + rate x span / period per key. The fixed window admits its rate on each side of a window edge " +
      "(up to 2 x rate in a span just over one period); the per-nginx bucket admits the limit on each nginx (2 x over the run)",
  },
  {
    id: "rate-exact-bursts", title: "rate limit, 3x offered in bursts of 15 for 12 s: mode rate against a fixed window and a per-nginx leaky bucket", group: "rate",
    promised: true, rate: RATE,
    load: { kind: "rate", schemes: ["dlock", "fixed", "local"], promised: ["dlock"], keys: 3, offered: 3, burst: 15, durationMs: 12000, slackMs: 20 },
    fault: null,
    about: "the same average as the row above, sent as 15 requests at once every 250 ms per key (clients that spend their quota in bursts): " +
      "two bursts on either side of a window edge each find a fresh fixed window, which admits rate on each side within 250 ms",
  },
  {
    id: "rate-redis-down", title: "rate limit, on_error = \"local\", fleet 2: lock Redis SIGSTOP 4 s under 3x offered load", group: "rate",
    promised: true, rate: RATE,
    load: { kind: "rate", schemes: ["fallback"], promised: [], keys: 3, offered: 3, durationMs: 9000, slackMs: 20 },
    fault: { kind: "redis-sigstop", ms: 4000, atMs: 2500 },
    about: "promised: while Redis cannot decide, the two nginx together admit no more than the limit over the outage (each its share, from its shared dict), " +
      "nobody waits on Redis once the breaker is open, and the guard decides on Redis again within a cooldown (1 s) of Redis returning. Reported: the spans " +
      "around the switches, where a fresh local share (on the way out) and Redis' state from before the pause (on the way back) each allow a burst again",
  },

  // ---------------------------------------------------------------- Redis topologies, continued (appended: row numbers stay)
  {
    id: "sentinel-failover-least", title: "Sentinel: SENTINEL FAILOVER under load, the lock user with only what the locks need (no ROLE)", group: "topology",
    promised: true, load: CRIT, topology: { ...SENTINEL, user: { name: "locker", password: "torture-acl-secret", prefixes: ["torture:"] } },
    fault: { kind: "sentinel-failover" },
    about: "row 17 with the README's smallest ACL rule for the lock user: ROLE is refused to it, so a fresh connection takes the sentinels' word for the master " +
      "(logged once per master at notice) and a demoted master's READONLY has them asked again. Promised as row 17: ROLE never vouched for more than " +
      "the sentinels' answer at that moment; WAIT 1 is what keeps a lock across the failover",
  },
];

module.exports = { GUARDS, VIAS, SCENARIOS, CRIT_LOAD, RATE };
