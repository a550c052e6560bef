package redisstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash/maphash"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestNameCacheKeepsTagsApart: a value's cached hash under one tag (a
// key's) is never served for another (a workspace's, a model's), even
// when their slots coincide (here forced: the key's hash is stored in the
// workspace's slots), and a slot pair keeps serving both its hashes once
// full. Expectations from crypto/hmac.
func TestNameCacheKeepsTagsApart(t *testing.T) {
	secret := []byte("names-internal-secret-01")
	want := func(tag byte, v string) string {
		m := hmac.New(sha256.New, secret)
		m.Write(append([]byte{tag, 0}, v...))
		return hex.EncodeToString(m.Sum(nil)[:12])
	}
	c := newNameCache()
	m := &mac{h: hmac.New(sha256.New, secret), cache: c}
	v := "sk-shared-value"
	h0, h1 := maphash.String(c.seed0, v), maphash.String(c.seed1, v)
	keyHash := &nameHash{h0: h0, h1: h1, tag: 'k'}
	copy(keyHash.hex[:], want('k', v))
	c.store(c.index('w', h0), keyHash)
	assert.Equal(t, want('w', v), string(m.appendHash(nil, 'w', v)))
	assert.Equal(t, want('w', v), string(m.appendHash(nil, 'w', v)), "from the cache")
	i := c.index('w', h0)
	assert.Same(t, keyHash, c.lookup(i, 'k', h0, h1), "both kept: the pair's two slots")
	assert.Equal(t, want('k', v), string(m.appendHash(nil, 'k', v)))
	assert.Equal(t, want('m', v), string(m.appendHash(nil, 'm', v)))
}
