package llmrate_test

import (
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T, func() time.Time) llmrate.Store { return llmrate.NewMemoryStore() })
}
