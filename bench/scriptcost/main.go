// Command scriptcost calls one Lua script n times against a redis-server,
// one call at a time, with the keys and arguments of a named layout, so
// that the server's instructions per call can be counted under cachegrind
// (measure.sh: the difference between runs of n and 2n calls). It measured
// the admission script's cost, what its parts cost (empty, TIME, GET, SET)
// and go-redis/redis_rate's script beside it (bench/redis-script-cost.txt).
//
//	go run ./scriptcost -addr 127.0.0.1:6399 -script FILE -layout LAYOUT -n 2000
//
// Layouts:
//   - admit: admit.lua's (redisstore): a solo request for one hot
//     workspace, an identity record per call, one binary argument (tokens
//     100, 10^9 requests and 10^12 tokens a minute, the server's TIME).
//   - admit-noid: the same without identity records.
//   - admit-f09dfa6: admit.lua's before this round (commit f09dfa6): keys
//     key entry, workspace entry, record; arguments now ("": TIME), the
//     request, the record's life.
//   - redis_rate: go-redis/redis_rate v10's allowN (one of 1,000 keys,
//     burst 2,000, 1,000 a minute, cost 1).
//   - micro: keys {w}e1 and a new record name per call, one 64-byte argument:
//     for scripts that time one command each.
//   - admit-pair: admit.lua's for a key in a workspace of another name (two
//     entries), as admit, an identity record per call.
//   - admitw, admitw-rt, admitw-max: redisstore's windowed admission
//     (arith.lua, admitone.lua, xplain.lua, window.lua and admitw.lua
//     concatenated) for the same request with one daily window on the key
//     and one on the workspace: 10^6 requests a day (admitw: two window
//     buckets); 10^6 requests and 10^9 tokens a day (admitw-rt: four);
//     10^12 requests a day (admitw-max: two, whose refill takes the long
//     exact path once 4.5 ms pass between calls). Never refused in 4,000
//     calls; no gauge, no MaxWait.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"strconv"

	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "redis-server address")
	file := flag.String("script", "", "Lua script file")
	layout := flag.String("layout", "admit", "keys and arguments: admit, admit-noid, admit-f09dfa6, redis_rate, micro, admit-pair, admitw, admitw-rt, admitw-max")
	n := flag.Int("n", 2000, "calls")
	flag.Parse()
	src, err := os.ReadFile(*file)
	if err != nil {
		log.Fatal(err)
	}
	doubles := func(vs ...float64) []byte {
		b := make([]byte, 0, 8*len(vs))
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
		return b
	}
	record := func(i int) string { return "{w}:a:" + strconv.Itoa(i) }
	var keys func(i int) []string
	var args []any
	switch *layout {
	case "admit":
		keys = func(i int) []string { return []string{"{w}e", record(i)} }
		args = []any{doubles(100, 1e9, 1e12, 1e9, 1e12, 1, math.NaN(), 5000)}
	case "admit-noid":
		keys = func(int) []string { return []string{"{w}e"} }
		args = []any{doubles(100, 1e9, 1e12, 1e9, 1e12, 1, math.NaN(), 5000)}
	case "admit-f09dfa6":
		keys = func(i int) []string { return []string{"{w}e", "{w}e", record(i)} }
		args = []any{"", doubles(100, 1e9, 1e12, 1e9, 1e12, 1), 5000}
	case "redis_rate":
		keys = func(i int) []string { return []string{"rr:" + strconv.Itoa(i%1000)} }
		args = []any{2000, 1000, 60, 1}
	case "micro":
		keys = func(i int) []string { return []string{"{w}e1", record(i)} }
		args = []any{doubles(100, 1e9, 1e12, 1e9, 1e12, 1, math.NaN(), 5000)}
	case "admit-pair":
		keys = func(i int) []string { return []string{"{w}w", "{w}k", record(i)} }
		args = []any{doubles(100, 1e9, 1e12, 1e9, 1e12, 0, math.NaN(), 5000)}
	case "admitw", "admitw-rt", "admitw-max":
		// The window buckets: code, meter, figure, window in µs (WSPEC).
		day := 86_400_000_000.0
		spec := doubles(0, 0, 1e6, day, 2, 0, 1e6, day) // key's requests, workspace's requests
		wkeys := []string{"{w}k:v86400000r", "{w}w:v86400000r"}
		switch *layout {
		case "admitw-rt":
			spec = doubles(0, 0, 1e6, day, 1, 1, 1e9, day, 2, 0, 1e6, day, 3, 1, 1e9, day)
			wkeys = []string{"{w}k:v86400000r", "{w}k:v86400000t", "{w}w:v86400000r", "{w}w:v86400000t"}
		case "admitw-max":
			spec = doubles(0, 0, 1e12, day, 2, 0, 1e12, day)
		}
		keys = func(i int) []string {
			return append(append([]string{"{w}k", "{w}w", "{w}k:c", "{w}w:c"}, wkeys...), record(i))
		}
		args = []any{"", doubles(100, 1e9, 1e12, 1e9, 1e12, 0), 5000, 0, 0, 0, 30000, "id", 0, spec}
	default:
		log.Fatalf("unknown layout %q", *layout)
	}
	c := redis.NewClient(&redis.Options{Addr: *addr})
	defer c.Close()
	s := redis.NewScript(string(src))
	ctx := context.Background()
	for i := range *n {
		if err := s.Run(ctx, c, keys(i), args...).Err(); err != nil && err != redis.Nil {
			log.Fatal(err)
		}
	}
	fmt.Println(*n, "calls")
}
