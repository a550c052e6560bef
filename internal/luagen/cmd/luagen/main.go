// Command luagen writes the Redis store's Lua scripts from their sources
// (see package internal/luagen): run by go generate in redisstore, it
// writes every luasrc/*.lua to the script of the same name in the current
// directory.
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/llmrate/llmrate/internal/luagen"
)

func main() {
	if err := run("luasrc"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(dir string) error {
	fsys := os.DirFS(dir)
	names, err := fs.Glob(fsys, "*.lua")
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("luagen: no sources in %s", dir)
	}
	for _, name := range names {
		b, err := luagen.Assemble(fsys, "parts", name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(".", name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
