// Every Redis script lua-resty-dlock runs, and the one way to run them:
// EVALSHA with the SHA1 computed locally, EVAL once on NOSCRIPT (after
// SCRIPT FLUSH, a Redis restart or a failover), which also caches it again.
// All scripts touch a single key, so they stay valid under Redis Cluster.

export interface Script {
  readonly name: string;
  readonly src: string;
  readonly sha: string;
}

function hex(s: string): string {
  return string.format(string.rep("%02x", s.length), ...string.byte(s, 1, s.length));
}

function script(name: string, src: string): Script {
  return { name, src, sha: hex(ngx.sha1_bin(src)) };
}

/**
 * KEYS[1] lock key, ARGV[1] token, ARGV[2] ttl ms.
 * Returns "OK" when acquired, else the holder's PTTL (-1: the key has no TTL).
 * A key of another type is an error, not "busy": someone else's data sits there.
 */
export const ACQUIRE = script("acquire", `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 'OK'
end
local t = redis.call('TYPE', KEYS[1]).ok
if t ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lock')
end
return redis.call('PTTL', KEYS[1])
`);

/** KEYS[1] lock key, ARGV[1] token. 1 when deleted, 0 when the key is not ours. */
export const RELEASE = script("release", `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`);

/** KEYS[1] lock key, ARGV[1] token, ARGV[2] ttl ms. 1 when extended, 0 when not ours. */
export const EXTEND = script("extend", `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`);

/** Run a single-key script; replies and errors exactly as lua-resty-redis returns them. */
export function run(red: RestyRedis, s: Script, key: string, ...args: (string | number)[]): RedisResult {
  const [res, err] = red.evalsha(s.sha, 1, key, ...args);
  if (res === false && err !== undefined && string.sub(err, 1, 8) === "NOSCRIPT") {
    return red.eval(s.src, 1, key, ...args);
  }
  return $multi(res, err);
}
