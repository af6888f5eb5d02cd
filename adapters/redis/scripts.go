package redis

import goredis "github.com/redis/go-redis/v9"

// The Lua scripts run atomically on the server. They touch keys derived
// from their KEYS (the stream named inside a delayed message's hash), so
// the adapter serves a single Redis server or a primary with replicas, not
// Redis Cluster.

// claimScript hands out pending entries with the exact times_delivered
// of each from XPENDING's extended form (neither command below returns
// it). Mode "claim": XAUTOCLAIM of the group's entries idle for min-idle.
// Mode "own": XREADGROUP from the cursor in this consumer's own pending
// entries (what it read before a crash, under the same name), whatever
// their idle time; the next cursor is "" once they are read.
// KEYS[1] stream; ARGV group, consumer, min-idle ms, cursor, count, mode.
// Returns {next cursor, entries, counts}.
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

// renewScript resets the idle time of entries this consumer still owns
// (a lease renewal for slow handlers; an entry another consumer claimed
// meanwhile is left alone). KEYS[1] stream; ARGV group, consumer, ids...
var renewScript = goredis.NewScript(`
local n = 0
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'IDLE', 0, 'JUSTID')
    n = n + 1
  end
end
return n
`)

// delayAddScript stores a delayed message: a hash with its fields and its
// stream, scored in the delayed set at server time + delay.
// KEYS[1] hash, KEYS[2] delayed set; ARGV delay ms, stream, fields...
var delayAddScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = {}
for i = 3, #ARGV do f[#f+1] = ARGV[i] end
redis.call('HSET', KEYS[1], '__stream', ARGV[2], unpack(f))
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), KEYS[1])
return now + tonumber(ARGV[1])
`)

// moveScript moves due delayed messages into their streams (XADD, then
// delete the hash and its set member). KEYS[1] delayed set; ARGV limit.
var moveScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, k in ipairs(due) do
  local h = redis.call('HGETALL', k)
  local stream = nil
  local out = {}
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

// joinScript joins a Broadcast instance: if its heartbeat expired, its old
// group is destroyed (the instance's copy expired); then the heartbeat is
// set and the group created at the stream's end.
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

// leaveScript removes a consumer from its group when it owns no pending
// entry (a consumer deleted with pending entries would lose them).
// KEYS[1] stream; ARGV group, consumer.
var leaveScript = goredis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #p == 0 then return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2]) end
return -1
`)

// leaseScript takes or renews a lease (lease.go): it extends the key if
// it holds the token, sets it if it is free, and answers 0 when another
// token holds it. KEYS[1] key; ARGV token, ttl ms.
var leaseScript = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if v == false then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]); return 1 end
return 0
`)

// releaseScript deletes a lease if it holds the token. KEYS[1] key; ARGV
// token.
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// declareSpecScript stores a topic's retention and length unless its hash
// exists, and returns what is stored. KEYS[1] hash; ARGV retention ms,
// max length.
var declareSpecScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'retention_ms', ARGV[1], 'max_length', ARGV[2])
end
return redis.call('HMGET', KEYS[1], 'retention_ms', 'max_length')
`)
