package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"hash/maphash"
	"sync/atomic"
)

// mac is a reusable HMAC state keyed with the store's secret, with scratch
// space: once reset, a state restarts from its precomputed pads, so a name
// costs two SHA-256 blocks and no allocation but the name's own; a hash
// the store's nameCache holds costs neither.
type mac struct {
	h     hash.Hash
	msg   []byte
	sum   [sha256.Size]byte
	name  []byte
	cache *nameCache
}

// appendHash appends to dst the hash of tag, 0, v: the first 12 bytes of
// its HMAC-SHA256, in hex; from the store's cache when it holds it.
func (m *mac) appendHash(dst []byte, tag byte, v string) []byte {
	h0, h1 := maphash.String(m.cache.seed0, v), maphash.String(m.cache.seed1, v)
	i := m.cache.index(tag, h0)
	if e := m.cache.lookup(i, tag, h0, h1); e != nil {
		return append(dst, e.hex[:]...)
	}
	m.h.Reset()
	m.msg = append(append(m.msg[:0], tag, 0), v...)
	m.h.Write(m.msg)
	e := &nameHash{h0: h0, h1: h1, tag: tag}
	hex.Encode(e.hex[:], m.h.Sum(m.sum[:0])[:12])
	m.cache.store(i, e)
	return append(dst, e.hex[:]...)
}

// nameSlots is how many hashes a store's nameCache holds at most: 4,096
// (32 KiB of slots, and up to 192 KiB of hashes, per store).
const nameSlots = 1 << 12

// nameCache holds the hashes that name a store's entries (of API keys,
// workspaces and models), so that a name in use costs two seeded maphash
// sums instead of an HMAC: 4 HMACs per admitted request (its admission's
// two names, its reconcile's two), about 5,000 of the client's 30,000
// instructions per admission at one call at a time
// (bench/redis-client-instructions-names.txt). It keeps no raw value (no
// API key stays in memory because of it): a hash is found by two 64-bit
// sums of its value under two random seeds (and its tag), so two values
// share a cached hash only when both sums collide, about one chance in
// 2^128 for two given values; the memory store, for comparison, tells
// entries apart by one such sum. It is two-way set-associative: a value
// has two slots, side by side (one cache line), and a new hash takes an
// empty one of the two, else one of them picked by its second sum. Safe
// for concurrent use: a slot is one atomic pointer to a hash never
// modified once stored.
type nameCache struct {
	seed0, seed1 maphash.Seed
	slots        [nameSlots]atomic.Pointer[nameHash]
}

// nameHash is one cached hash: the two sums and the tag of its value, and
// the hash in hex.
type nameHash struct {
	h0, h1 uint64
	tag    byte
	hex    [24]byte
}

func newNameCache() *nameCache {
	return &nameCache{seed0: maphash.MakeSeed(), seed1: maphash.MakeSeed()}
}

// index is the first of the two slots of a value of tag whose first sum
// is h0 (the second is index^1).
func (c *nameCache) index(tag byte, h0 uint64) uint64 {
	return (h0 ^ uint64(tag)*0x9e3779b97f4a7c15) & (nameSlots - 1) &^ 1
}

// lookup returns the hash held in slot i or i+1 for (tag, h0, h1), or nil.
func (c *nameCache) lookup(i uint64, tag byte, h0, h1 uint64) *nameHash {
	for j := i; j < i+2; j++ {
		if e := c.slots[j].Load(); e != nil && e.h0 == h0 && e.h1 == h1 && e.tag == tag {
			return e
		}
	}
	return nil
}

// store puts e in slot i or i+1: an empty one, else the one e's second
// sum picks.
func (c *nameCache) store(i uint64, e *nameHash) {
	switch {
	case c.slots[i].Load() == nil:
	case c.slots[i+1].Load() == nil:
		i++
	default:
		i += e.h1 & 1
	}
	c.slots[i].Store(e)
}
