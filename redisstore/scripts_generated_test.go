package redisstore_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmrate/llmrate/internal/luagen"
)

// TestScriptsAreGenerated: every script the store embeds is exactly what
// go generate writes from its source in luasrc (its shared parts in
// luasrc/parts): a generated script edited by hand, or a source or part
// changed without running go generate, fails here. (The scripts that share
// nothing with another, arith.lua, entry.lua and the like, are written by
// hand and carry no generated header.)
func TestScriptsAreGenerated(t *testing.T) {
	src := os.DirFS("luasrc")
	sources, err := fs.Glob(src, "*.lua")
	if err != nil || len(sources) == 0 {
		t.Fatalf("no sources in luasrc: %v", err)
	}
	have := map[string]bool{}
	for _, name := range sources {
		have[name] = true
		want, err := luagen.Assemble(src, "parts", name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("%s: %v (run go generate ./redisstore)", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what luasrc/%s generates: run go generate ./redisstore", name, name)
		}
	}
	// A script that says it is generated has a source; every part is used.
	scripts, _ := filepath.Glob("*.lua")
	for _, name := range scripts {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.HasPrefix(b, []byte("-- Code generated")) && !have[name] {
			t.Errorf("%s says it is generated but luasrc has no source for it", name)
		}
	}
	parts, _ := fs.Glob(src, "parts/*.lua")
	for _, p := range parts {
		used := false
		for _, name := range sources {
			b, _ := fs.ReadFile(src, name)
			used = used || bytes.Contains(b, []byte("--#include "+p[len("parts/"):]+"\n"))
		}
		if !used {
			t.Errorf("luasrc/%s is included by no source", p)
		}
	}
}
