package llmratetest_test

import (
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/llmratetest"
)

// A store's conformance test, as it would appear in the store's own
// _test.go file: the memory store here (it reads AdmitRequest.Now, which
// carries clock). A Postgres or Memcached store is called the same way,
// configured to read clock.
func ExampleTestStore() {
	testConformance := func(t *testing.T) { // func TestConformance(t *testing.T)
		llmratetest.TestStore(t, func(t *testing.T, clock func() time.Time) llmrate.Store {
			return llmrate.NewMemoryStore()
		})
	}
	_ = testConformance
}
