// The wake-up subscriber of one Redis endpoint in one worker: a timer that
// owns one connection, in two light threads of that timer (a cosocket is
// full-duplex in lua-nginx-module: one thread may read while another writes).
//
//   reader    blocks on the connection and hands each message to
//             subscriptions.ts. It never wakes up to poll: nginx logs every
//             cosocket read timeout at error level, so Redis answers a PING
//             the control thread sends every HEARTBEAT, and a read that
//             times out (SILENCE) means Redis is gone (one line per outage).
//   control   sends SUBSCRIBE/UNSUBSCRIBE as waiters come and go, wakes the
//             first waiter of a key whose due time passed, and stops the
//             session (idle for IDLE seconds, the worker exiting). It sleeps
//             on a semaphore until the next of those or until rung (a new
//             key, an earlier due time), and at most SWEEP: nothing tells a
//             worker that nginx reloads, nor that a waiter's request was
//             killed while it waited (wait.ts drops its ticket when it looks).
//             These looks cost no I/O.
//
// The replies are read raw (resp.ts): lua-resty-redis closes a subscribed
// connection on a read timeout and reads one reply per call.

import * as check from "../core/check";
import type * as redis from "./client";
import * as connection from "./connection";
import * as resp from "./resp";
import * as scripts from "./scripts";
import * as subs from "../core/subscriptions";
import * as wakenode from "./wakenode";
import * as waits from "../core/wait";
import * as clock from "../core/clock";
import * as late from "../core/late";

const lua_pairs = pairs;
const NOTICE = ngx.NOTICE;
const WARN = ngx.WARN;
const lua_pcall = pcall;
const lua_tostring = tostring;
const lua_type = type;
const math_min = math.min;
const ngx_log = ngx.log;
const clock_now = clock.now;
const on_its_way = late.onItsWay;
const clock_sleep = clock.sleep;
const clock_timeout = clock.timeout;
const str_sub = string.sub;
const thread_spawn = ngx.thread.spawn;
const thread_wait = ngx.thread.wait;
const timer_at = ngx.timer.at;
const update_time = ngx.update_time;
const worker_exiting = ngx.worker.exiting;

const CHANNEL = scripts.CHANNEL;
/** Seconds between PINGs: Redis answers, so a read waits at most this long plus a round trip. */
const HEARTBEAT = 5;
/**
 * Seconds without a byte from Redis (six PINGs unanswered, plus the
 * endpoint's read_timeout) after which the connection is given up: a
 * partition that leaves it half-open. Waiters meanwhile still wake at their
 * holder's expiry, and a worker busy elsewhere for a few seconds is no outage.
 */
const SILENCE = 30;
/**
 * Seconds between looks at the worker exiting and at waiters killed while
 * they waited (a key handed to one is passed on when its hand-off is heard).
 */
const SWEEP = 0.1;
/** Seconds a subscriber with nothing to watch stays connected before it stops. */
const IDLE = 10;
/**
 * Seconds before the first reconnection attempt after the connection failed,
 * and the most between attempts: nginx logs each refused connect at error
 * level, and a restarting Redis is back within about a second.
 */
const RETRY = 1;
const RETRY_MAX = 8;

interface Session {
  readonly sock: NgxTcpSocket;
  /** The control thread asked the reader to stop (the reply to its PING ends the read). */
  stopping: boolean;
  /** The reader stopped: the control thread stops too. */
  ended: boolean;
  /** Why the control thread could not write (the connection failed). */
  failed: string | undefined;
}

/** Bring the connection's subscriptions in line with what is wanted. */
function sync(s: subs.Subscriber, sock: NgxTcpSocket): string | undefined {
  subs.prune(s);
  let add: string[] | undefined;
  let drop: string[] | undefined;
  for (const [rkey] of lua_pairs(s.wanted)) {
    if (!s.sent.has(rkey)) {
      if (add === undefined) add = ["subscribe"];
      add.push(CHANNEL + rkey);
      s.sent.set(rkey, true);
    }
  }
  let gone: string[] | undefined;
  for (const [rkey] of lua_pairs(s.sent)) {
    if (!s.wanted.has(rkey)) {
      if (drop === undefined) drop = ["unsubscribe"];
      drop.push(CHANNEL + rkey);
      if (gone === undefined) gone = [];
      gone.push(rkey);
    }
  }
  if (gone !== undefined) {
    for (const i of $range(1, gone.length)) {
      const rkey = gone[i - 1]!;
      s.sent.delete(rkey);
      s.live.delete(rkey);
    }
  }
  if (add !== undefined) {
    const [ok, err] = sock.send(resp.encode(add));
    if (ok === undefined) return lua_tostring(err);
  }
  if (drop !== undefined) {
    const [ok, err] = sock.send(resp.encode(drop));
    if (ok === undefined) return lua_tostring(err);
  }
  return undefined;
}

function tell(s: subs.Subscriber, sess: Session): string | undefined {
  let pinged = clock_now();
  let idleSince = clock_now();
  while (!sess.ended) {
    s.rung = false;
    update_time();
    const now = clock_now();
    if (subs.idle(s)) {
      if (now - idleSince >= IDLE || worker_exiting()) break;
    } else if (worker_exiting()) {
      break;
    } else {
      idleSince = now;
    }
    const err = sync(s, sess.sock);
    if (err !== undefined) return err;
    subs.overdue(s);
    if (now - pinged >= HEARTBEAT) {
      const [ok, perr] = sess.sock.send(resp.encode(["ping"]));
      if (ok === undefined) return lua_tostring(perr);
      pinged = now;
    }
    let due = math_min(pinged + HEARTBEAT, now + SWEEP);
    if (subs.idle(s)) due = math_min(due, idleSince + IDLE);
    s.wakeAt = subs.nextLook(s, due);
    if (!s.rung) s.bell.wait(clock_timeout(s.wakeAt - now));
  }
  if (sess.ended) return undefined;
  // Stop the reader: it ends at the next reply, this PING's.
  sess.stopping = true;
  const [ok, err] = sess.sock.send(resp.encode(["ping"]));
  return ok === undefined ? lua_tostring(err) : undefined;
}

/** The control thread: changes go out, due keys are looked at (sess.failed: why a write failed). */
function control(this: void, s: subs.Subscriber, sess: Session): void {
  sess.failed = tell(s, sess);
}

/** The reader: messages in; nil when asked to stop, else why the connection ended. */
function reader(this: void, s: subs.Subscriber, sess: Session): string | undefined {
  const r = resp.reader(sess.sock);
  while (true) {
    const [msg, rerr] = resp.read(r);
    if (sess.stopping) return undefined;
    if (msg === undefined) return "dlock: redis " + s.conf.endpoint + ": wake-up subscription: " + lua_tostring(rerr);
    if (msg === false) {
      if (str_sub(lua_tostring(rerr), 1, 6) === "NOPERM") {
        // An ACL user without channel permissions: no wake-ups on this endpoint, ever; its waiters poll.
        s.refused = true;
        ngx_log(WARN, "dlock: redis ", s.conf.endpoint, ": the user may not subscribe to ", CHANNEL,
          "*: waiters poll instead of being woken (grant it with ACL SETUSER <user> &", CHANNEL, "*): ", rerr);
        return undefined;
      }
      return "dlock: redis " + s.conf.endpoint + ": wake-up subscription: " + lua_tostring(rerr);
    }
    if (lua_type(msg) === "table") {
      const m = msg as LuaTable<number, unknown>;
      const kind = m.get(1);
      if (kind === "message") {
        subs.heard(s, str_sub(lua_tostring(m.get(2)), CHANNEL.length + 1), lua_tostring(m.get(3)));
      } else if (kind === "subscribe") {
        const rkey = str_sub(lua_tostring(m.get(2)), CHANNEL.length + 1);
        if (s.sent.has(rkey)) {
          s.live.set(rkey, true);
          // A release, or a key handed to one of them, may have come before the subscription: they look once more.
          waits.recheck(rkey);
        }
      }
    }
  }
}

/** One connection's life: returns why it ended (nil: nothing left to watch, or the worker exits). */
function session(s: subs.Subscriber): string | undefined {
  const [red, err] = wakenode.connect(s);
  if (red === undefined) return err;
  s.connects++;
  if (s.down) {
    s.down = false;
    ngx_log(NOTICE, "dlock: redis ", s.conf.endpoint, ": wake-up subscription connected again");
  }
  const sock = connection.socket(red)!;
  const conf = s.conf;
  sock.settimeouts(conf.connect_timeout, conf.read_timeout, SILENCE * 1000 + conf.read_timeout);
  const sess: Session = { sock, stopping: false, ended: false, failed: undefined };
  const ctl = thread_spawn(control, s, sess);
  const [ok, res] = lua_pcall(reader, s, sess);
  sess.ended = true;
  s.rung = false;
  subs.ring(s);
  const [waited, cerr] = thread_wait(ctl);
  red.close();
  if (!ok) return "dlock: wake-up subscriber failed: " + check.text(res);
  if (!waited) return "dlock: wake-up subscriber failed: " + check.text(cerr);
  if (res !== undefined) return res as string;
  return sess.failed !== undefined ? "dlock: redis " + conf.endpoint + ": wake-up subscription: " + sess.failed : undefined;
}

/** Sleep up to `seconds`, less when the worker starts exiting. */
function pause(seconds: number): void {
  const deadline = clock_now() + seconds;
  while (!worker_exiting()) {
    update_time();
    const left = deadline - clock_now();
    if (left < 0.001) return;
    clock_sleep(math_min(left, SWEEP));
  }
}

function run(this: void, premature: boolean, s: subs.Subscriber): void {
  // Started late, after start() took this timer for dropped: the one started instead runs.
  if (s.running) return;
  s.running = true;
  s.scheduled = undefined;
  let retry = RETRY;
  while (!premature) {
    // A raise must not leave `running` set with nobody running: wake-ups would stop for good.
    const [ok, res] = lua_pcall(session, s);
    let err = res as string | undefined;
    if (!ok) err = "dlock: wake-up subscriber failed: " + check.text(res);
    // Waiters sleeping until word comes (or the subscription does) would not hear it now: they poll again.
    subs.lost(s);
    // Nobody waits here any more: no need to say so, nor to connect again.
    // Keys kept only for their grace are let go of at once: a connection
    // made again for them would serve nobody, and while Redis is gone each
    // attempt logs a refused connect. The next waiter starts a subscriber.
    subs.prune(s, 0);
    if (err === undefined || subs.idle(s)) break;
    if (!s.down) {
      // Once per outage: every attempt to reconnect would say the same.
      s.down = true;
      retry = RETRY;
      ngx_log(WARN, "dlock: ", check.reason(err), " (waiters poll until it is back)");
    } else {
      retry = math_min(retry * 2, RETRY_MAX);
    }
    pause(retry);
    subs.prune(s, 0);
    if (subs.idle(s) || worker_exiting()) break;
  }
  s.running = false;
}

/**
 * Start the subscriber of s (its timer), unless it runs or a timer started for
 * it is on its way: one nginx dropped (late.ts) would stop wake-ups for good.
 */
export function start(s: subs.Subscriber): void {
  if (s.running) return;
  const now = clock_now();
  if (on_its_way(s.scheduled, now, 0)) return;
  const [ok] = timer_at(0, run, s);
  if (ok !== undefined) s.scheduled = now;
}
