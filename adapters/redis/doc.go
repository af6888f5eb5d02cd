// Package redis is sluice's Redis Streams adapter (go-redis v9): a driver
// under the portable layer. docs/adapters/redis.md describes the mapping
// and its limits (a single server or a primary with replicas, not Redis
// Cluster).
package redis
