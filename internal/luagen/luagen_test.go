package luagen_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/llmrate/llmrate/internal/luagen"
)

func TestAssemble(t *testing.T) {
	fsys := fstest.MapFS{
		"s.lua":          {Data: []byte("local a = 1\n--#include f.lua\nif a then\n  --#include g.lua\n\nend\n")},
		"parts/f.lua":    {Data: []byte("local function f() return 1 end\n")},
		"parts/g.lua":    {Data: []byte("a = 2\n--#include h.lua\n")},
		"parts/h.lua":    {Data: []byte("\na = 3\n")},
		"cycle.lua":      {Data: []byte("--#include c1.lua\n")},
		"parts/c1.lua":   {Data: []byte("--#include c2.lua\n")},
		"parts/c2.lua":   {Data: []byte("  --#include c1.lua\n")},
		"missing.lua":    {Data: []byte("x\n--#include nope.lua\n")},
		"nonl.lua":       {Data: []byte("--#include nonl.lua\n")},
		"parts/nonl.lua": {Data: []byte("x = 1")},
		"up.lua":         {Data: []byte("--#include ../s.lua\n")},
		"rn.lua":         {Data: []byte("--#include r.lua\nif solo then\n  --#include r.lua wl=kl wkey=kkey\nend\n")},
		"parts/r.lua":    {Data: []byte("-- wl from wkey\nwl = get(wkey, wl2, \"wl\", 2) + wl\n")},
		"badrn.lua":      {Data: []byte("--#include r.lua wl=\n")},
	}
	got, err := luagen.Assemble(fsys, "parts", "s.lua")
	if err != nil {
		t.Fatal(err)
	}
	want := luagen.Header("s.lua") + "local a = 1\nlocal function f() return 1 end\nif a then\n  a = 2\n\n  a = 3\n\nend\n"
	if string(got) != want {
		t.Errorf("Assemble:\n%s\nwant:\n%s", got, want)
	}
	got, err = luagen.Assemble(fsys, "parts", "rn.lua")
	if err != nil {
		t.Fatal(err)
	}
	want = luagen.Header("rn.lua") + "-- wl from wkey\nwl = get(wkey, wl2, \"wl\", 2) + wl\nif solo then\n  -- kl from kkey\n  kl = get(kkey, wl2, \"kl\", 2) + kl\nend\n"
	if string(got) != want {
		t.Errorf("Assemble with renames:\n%s\nwant:\n%s", got, want)
	}
	for name, msg := range map[string]string{
		"badrn.lua":   "bad rename",
		"cycle.lua":   "include cycle through c1.lua",
		"missing.lua": "missing.lua:2",
		"nonl.lua":    "does not end in a newline",
		"up.lua":      "bad include",
		"absent.lua":  "absent.lua",
	} {
		if _, err := luagen.Assemble(fsys, "parts", name); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Assemble(%s): %v, want an error containing %q", name, err, msg)
		}
	}
}
