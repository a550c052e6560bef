package llmrate_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// buildTiersCopy builds tiers.go alone (it needs only the standard library)
// as its own module, after edit, and returns the compiler's output.
func buildTiersCopy(t *testing.T, edit func(string) string) (string, error) {
	t.Helper()
	src, err := os.ReadFile("tiers.go")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module tierscheck\n\ngo 1.25\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tiers.go"), []byte(edit(string(src))), 0o644))
	cmd := exec.Command("go", "build", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestAddingATierWithoutAnEntryFailsToCompile proves the compile-time
// assertion: a new Tier constant without a TierTable field does not build.
func TestAddingATierWithoutAnEntryFailsToCompile(t *testing.T) {
	t.Parallel()
	out, err := buildTiersCopy(t, func(s string) string { return s })
	require.NoError(t, err, "the unmodified copy must build, or the next check proves nothing:\n%s", out)

	out, err = buildTiersCopy(t, func(s string) string {
		const anchor = "\tEnterprise\n\n\ttierCount"
		require.Contains(t, s, anchor)
		return strings.Replace(s, anchor, "\tEnterprise\n\tPlatinum\n\n\ttierCount", 1)
	})
	require.Error(t, err, "a Tier without a TierTable entry compiled")
	require.Contains(t, out, "tiers.go")

	out, err = buildTiersCopy(t, func(s string) string {
		return strings.Replace(s, "Free, Developer, Team, Growth, Scale, Enterprise Limits", "Free, Developer, Team, Growth, Scale, Enterprise, Platinum Limits", 1)
	})
	require.Error(t, err, "a TierTable entry without a Tier compiled:\n%s", out)
}
