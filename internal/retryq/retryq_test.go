package retryq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/llmrate/llmrate/internal/retryq"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errDown = errors.New("store down")

type job struct {
	id    int
	added time.Time
	tries []time.Time
	size  int64
}

type outcome struct {
	id  int
	at  time.Duration // after the job was added
	err error
}

// rec collects what Done reports.
type rec struct {
	mu  sync.Mutex
	got []outcome
}

func (r *rec) done(j *job, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, outcome{j.id, time.Since(j.added), err})
}

func (r *rec) all() []outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outcome(nil), r.got...)
}

// TestEveryJobDroppedAtItsOwnDeadline: with a store that fails every call
// only at its timeout, many jobs and few tries in flight, each job is
// dropped no sooner than its retry time and no later than that plus one
// try (and some scheduling slack): not one after another, a pass over all
// of them taking jobs × timeout.
func TestEveryJobDroppedAtItsOwnDeadline(t *testing.T) {
	const (
		n        = 300
		retryFor = 300 * time.Millisecond
		timeout  = 20 * time.Millisecond
		slack    = 200 * time.Millisecond // a loaded machine's scheduling
	)
	r := &rec{}
	q := retryq.New(retryq.Config[job]{
		For: retryFor, First: 10 * time.Millisecond, Max: 10 * time.Millisecond,
		Bound: 1000, Parallel: 4,
		Try:  func(*job) error { time.Sleep(timeout); return errDown },
		Done: r.done,
	})
	for i := range n {
		if err := q.Add(job{id: i, added: time.Now()}, errDown); err != nil {
			t.Fatal(err)
		}
	}
	if left := q.Close(context.Background()); len(left) != 0 {
		t.Fatalf("Close left %d", len(left))
	}
	got := r.all()
	if len(got) != n {
		t.Fatalf("%d reported, want %d", len(got), n)
	}
	var latest time.Duration
	for _, o := range got {
		if !errors.Is(o.err, errDown) {
			t.Fatalf("job %d: err %v", o.id, o.err)
		}
		if o.at < retryFor {
			t.Fatalf("job %d dropped after %v, before its %v", o.id, o.at, retryFor)
		}
		latest = max(latest, o.at)
	}
	if latest > retryFor+timeout+slack {
		t.Fatalf("a job was dropped %v after it was added; want at most %v + one try (%v)", latest, retryFor, timeout)
	}
	t.Logf("latest drop %v after its job was added", latest)
}

// TestAppliedAfterBackoff: a job is tried again after First, then at
// doubling waits up to Max, until applied; Done hears of it once, applied.
func TestAppliedAfterBackoff(t *testing.T) {
	r := &rec{}
	var mu sync.Mutex
	q := retryq.New(retryq.Config[job]{
		For: time.Minute, First: 10 * time.Millisecond, Max: 40 * time.Millisecond,
		Bound: 10, Parallel: 2,
		Try: func(j *job) error {
			mu.Lock()
			defer mu.Unlock()
			j.tries = append(j.tries, time.Now())
			if len(j.tries) < 5 {
				return errDown
			}
			return nil
		},
		Done: func(j *job, err error) {
			mu.Lock()
			waits := []time.Duration{j.tries[0].Sub(j.added)}
			for i := 1; i < len(j.tries); i++ {
				waits = append(waits, j.tries[i].Sub(j.tries[i-1]))
			}
			mu.Unlock()
			for i, want := range []time.Duration{10, 20, 40, 40, 40} {
				if waits[i] < want*time.Millisecond {
					t.Errorf("wait %d was %v, want at least %vms", i, waits[i], want)
				}
			}
			r.done(j, err)
		},
	})
	if err := q.Add(job{id: 1, added: time.Now()}, errDown); err != nil {
		t.Fatal(err)
	}
	if left := q.Close(context.Background()); len(left) != 0 {
		t.Fatalf("Close left %d", len(left))
	}
	got := r.all()
	if len(got) != 1 || got[0].err != nil {
		t.Fatalf("reported %+v, want one applied", got)
	}
}

// TestBounded: past Bound jobs, or MaxBytes of their sizes, Add refuses;
// once Close was called it refuses every job; Close with its context done
// returns what was held, without reporting it.
func TestBounded(t *testing.T) {
	r := &rec{}
	block := make(chan struct{})
	q := retryq.New(retryq.Config[job]{
		For: time.Hour, First: time.Hour, Max: time.Hour,
		Bound: 3, MaxBytes: 100, Size: func(j *job) int64 { return j.size }, Parallel: 1,
		Try:  func(*job) error { <-block; return nil },
		Done: r.done,
	})
	for i, c := range []struct {
		size int64
		want error
	}{{60, nil}, {50, retryq.ErrFull}, {40, nil}, {0, nil}, {0, retryq.ErrFull}} {
		if err := q.Add(job{id: i, size: c.size}, errDown); err != c.want {
			t.Fatalf("add %d (size %d): %v, want %v", i, c.size, err, c.want)
		}
	}
	if n := q.Len(); n != 3 {
		t.Fatalf("Len %d, want 3", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	left := q.Close(ctx)
	if len(left) != 3 || !errors.Is(left[0].Err, errDown) {
		t.Fatalf("left %+v", left)
	}
	if err := q.Add(job{}, errDown); err != retryq.ErrClosed {
		t.Fatalf("after Close: %v", err)
	}
	if len(r.all()) != 0 {
		t.Fatalf("reported %+v", r.all())
	}
	close(block)
}
