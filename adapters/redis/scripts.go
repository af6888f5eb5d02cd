package redis

import goredis "github.com/redis/go-redis/v9"

// The Lua scripts run atomically on the server. Some touch keys not in
// their KEYS (the stream named in a delayed message's hash): not for
// Redis Cluster.

// claimScript hands out pending entries with each one's times_delivered
// (from XPENDING): mode "claim" XAUTOCLAIMs the group's entries idle for
// min-idle; mode "own" reads this consumer's own pending entries from the
// cursor (next cursor "" once read). KEYS[1] stream; ARGV group,
// consumer, min-idle ms, cursor, count, mode. Returns {cursor, entries,
// counts}.
var claimScript = goredis.NewScript(`
local nxt, entries
if ARGV[6] == 'own' then
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[5], 'STREAMS', KEYS[1], ARGV[4])
  entries = {}
  if r and r[1] then entries = r[1][2] end
  nxt = ''
  if #entries > 0 then nxt = entries[#entries][1] end
else
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
  nxt, entries = r[1], r[2]
end
local counts = {}
for i, e in ipairs(entries) do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
  if p[1] then counts[i] = p[1][4] else counts[i] = 1 end
end
return {nxt, entries, counts}
`)

// idleScript sets the idle time of the entries this consumer still owns
// (not of one another consumer claimed) and returns how many are pending.
// KEYS[1] stream; ARGV group, consumer, idle ms, ids...
var idleScript = goredis.NewScript(`
local n = 0
for i = 4, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] then n = n + 1 end
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'IDLE', ARGV[3], 'JUSTID')
  end
end
return n
`)

// delayAddScript stores a delayed message's fields and stream in a hash,
// scored in the delayed set at server time + delay. KEYS[1] hash, KEYS[2]
// delayed set; ARGV delay ms, stream, fields...
var delayAddScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], '__stream', ARGV[2], unpack(ARGV, 3))
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), KEYS[1])
return now + tonumber(ARGV[1])
`)

// moveScript moves due delayed messages into their streams and returns
// the ms until the next is due (-1: none). KEYS[1] delayed set; ARGV limit.
var moveScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, k in ipairs(due) do
  local h = redis.call('HGETALL', k)
  local stream, out = nil, {}
  for i = 1, #h, 2 do
    if h[i] == '__stream' then stream = h[i+1] else out[#out+1] = h[i]; out[#out+1] = h[i+1] end
  end
  if stream and #out > 0 then redis.call('XADD', stream, '*', unpack(out)) end
  redis.call('DEL', k)
  redis.call('ZREM', KEYS[1], k)
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if nxt[2] then return tonumber(nxt[2]) - now end
return -1
`)

// joinScript joins a Broadcast instance: destroys its group if its
// heartbeat expired, sets the heartbeat, creates the group at the end.
// KEYS[1] stream, KEYS[2] heartbeat; ARGV group, ttl ms.
var joinScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.pcall('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
local r = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '$', 'MKSTREAM')
if type(r) == 'table' and r.err and not string.find(r.err, 'BUSYGROUP') then return r end
return 1
`)

// expireScript destroys a broadcast group whose heartbeat is gone.
// KEYS[1] stream, KEYS[2] heartbeat; ARGV group.
var expireScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.pcall('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
end
return 0
`)

// leaveScript deletes a consumer that owns no pending entry.
// KEYS[1] stream; ARGV group, consumer.
var leaveScript = goredis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #p == 0 then return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2]) end
return -1
`)

// leaseScript takes or renews a lease: 1 when the token holds it, 0 when
// another does. KEYS[1] key; ARGV token, ttl ms.
var leaseScript = goredis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`)

// releaseScript deletes a lease the token holds. KEYS[1] key; ARGV token.
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// declareSpecScript stores a topic's retention and length unless stored,
// and returns what is. KEYS[1] hash; ARGV retention ms, max length.
var declareSpecScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'retention_ms', ARGV[1], 'max_length', ARGV[2])
end
return redis.call('HMGET', KEYS[1], 'retention_ms', 'max_length')
`)
