package main

import (
	"container/heap"
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/llmrate/llmrate"
)

// FlowResult is what a simulation with response durations saw: requests
// admitted at once, admitted after a wait (WithMaxWait), and refused, with
// the requests in flight per second against the concurrency figure.
type FlowResult struct {
	Limits  llmrate.Limits
	MaxWait time.Duration
	Title   string

	Offered, AdmittedNow, Waited int
	RefusedBy                    map[string]int // bucket or gauge → refusals
	RetryAfter                   map[int]int    // seconds → refusals
	Waits                        []time.Duration
	MaxInFlight                  int

	Seconds                                   int
	OfferedRPS, NowRPS, WaitedRPS, RefusedRPS []float64 // by arrival second
	InFlight                                  []float64 // slots held at each second's middle
	streamEnds                                endHeap
	store                                     *llmrate.MemoryStore
	start                                     time.Time
	holding                                   [][2]float64 // slot intervals, seconds from the start
	nextID                                    int
}

// stream is an admitted request until its response ends.
type stream struct {
	end    time.Time
	req    llmrate.AdmitRequest
	actual int64
}

type endHeap []stream

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].end.Before(h[j].end) }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(stream)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// SimulateFlow replays reqs against llmrate's memory store, deciding each
// request exactly as the limiter does (the same Store calls: one admission
// with its identity and max wait, one reconcile when its response ends,
// which releases its slot), on a simulated clock: a request admitted at
// t with a wait w streams from t+w for its Duration and holds its slot
// from t to the end. Requests of one key spend the key's and its
// workspace's buckets and gauges at the figures lim.
//
// The limiter itself holds a waiting request on a real timer, which a
// replay of minutes cannot use: this is why the flow runs on the store.
func SimulateFlow(reqs []Request, lim llmrate.Limits, maxWait time.Duration) (*FlowResult, error) {
	res := &FlowResult{Limits: lim, MaxWait: maxWait, RefusedBy: map[string]int{}, RetryAfter: map[int]int{},
		store: llmrate.NewMemoryStore(), start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	last := 0.0
	for _, q := range reqs {
		last = math.Max(last, q.T+q.Duration+maxWait.Seconds())
	}
	res.Seconds = int(last) + 1
	for _, s := range []*[]float64{&res.OfferedRPS, &res.NowRPS, &res.WaitedRPS, &res.RefusedRPS, &res.InFlight} {
		*s = make([]float64, res.Seconds)
	}
	for _, q := range reqs {
		now := res.start.Add(time.Duration(q.T * float64(time.Second)))
		if err := res.endUntil(now); err != nil {
			return nil, err
		}
		if err := res.offer(q, now); err != nil {
			return nil, err
		}
	}
	if err := res.endUntil(res.start.Add(time.Duration(res.Seconds+1) * time.Second)); err != nil {
		return nil, err
	}
	for _, iv := range res.holding {
		for s := int(math.Ceil(iv[0] - 0.5)); s < res.Seconds && float64(s)+0.5 < iv[1]; s++ {
			if s >= 0 {
				res.InFlight[s]++
			}
		}
	}
	for _, v := range res.InFlight {
		res.MaxInFlight = max(res.MaxInFlight, int(v))
	}
	return res, nil
}

// endUntil ends every stream whose response has ended by now, in order:
// its reconcile charges its reported tokens and releases its slot.
func (r *FlowResult) endUntil(now time.Time) error {
	for r.streamEnds.Len() > 0 && !r.streamEnds[0].end.After(now) {
		s := heap.Pop(&r.streamEnds).(stream)
		err := r.store.Reconcile(context.Background(), llmrate.ReconcileRequest{Key: s.req.Key, Workspace: s.req.Workspace,
			KeyLimits: s.req.KeyLimits, WorkspaceLimits: s.req.WorkspaceLimits, Estimate: s.req.Tokens, Actual: s.actual,
			Now: s.end, ID: s.req.ID})
		if err != nil {
			return err
		}
	}
	return nil
}

// offer decides one arrival.
func (r *FlowResult) offer(q Request, now time.Time) error {
	ws := q.Workspace
	if ws == "" {
		ws = q.Key
	}
	est := q.Estimate
	if est == 0 {
		est = max(1, q.Tokens)
	}
	r.nextID++
	req := llmrate.AdmitRequest{Key: q.Key, Workspace: ws, KeyLimits: r.Limits, WorkspaceLimits: r.Limits, Tokens: est,
		Now: now, ID: strconv.Itoa(r.nextID), MaxWait: r.MaxWait}
	d, err := r.store.Admit(context.Background(), req)
	if err != nil {
		return err
	}
	sec := int(q.T)
	r.Offered++
	r.OfferedRPS[sec]++
	if !d.Allowed {
		r.RefusedRPS[sec]++
		r.RefusedBy[d.Refused.String()]++
		ra := 60
		if !d.NeverFits {
			ra = int(min(max((d.RetryAfter+time.Second-1)/time.Second, 1), 60))
		}
		r.RetryAfter[ra]++
		return nil
	}
	if d.Wait > 0 {
		r.Waited++
		r.WaitedRPS[sec]++
		r.Waits = append(r.Waits, d.Wait)
	} else {
		r.AdmittedNow++
		r.NowRPS[sec]++
	}
	end := now.Add(d.Wait + time.Duration(q.Duration*float64(time.Second)))
	heap.Push(&r.streamEnds, stream{end: end, req: req, actual: q.Tokens})
	r.holding = append(r.holding, [2]float64{q.T, end.Sub(r.start).Seconds()})
	return nil
}

// Print writes the summary.
func (r *FlowResult) Print(w io.Writer) {
	fmt.Fprintln(w, r.Title)
	pct := func(a int) float64 {
		if r.Offered == 0 {
			return 0
		}
		return 100 * float64(a) / float64(r.Offered)
	}
	refused := r.Offered - r.AdmittedNow - r.Waited
	fmt.Fprintf(w, "offered  %d requests\n", r.Offered)
	fmt.Fprintf(w, "admitted %d requests at once (%.1f%%)\n", r.AdmittedNow, pct(r.AdmittedNow))
	fmt.Fprintf(w, "waited   %d requests (%.1f%%), then admitted", r.Waited, pct(r.Waited))
	if len(r.Waits) > 0 {
		ws := append([]time.Duration(nil), r.Waits...)
		sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
		fmt.Fprintf(w, ": wait median %v, max %v", ws[len(ws)/2].Round(time.Millisecond), ws[len(ws)-1].Round(time.Millisecond))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "refused  %d requests (%.1f%%)\n", refused, pct(refused))
	for _, b := range sortedKeys(r.RefusedBy) {
		fmt.Fprintf(w, "  by %-20s %d\n", b, r.RefusedBy[b])
	}
	fmt.Fprintf(w, "in flight at most %d", r.MaxInFlight)
	if c := r.Limits.ConcurrentRequests; c > 0 {
		fmt.Fprintf(w, " (figure %d)", c)
	}
	fmt.Fprintln(w)
	if len(r.RetryAfter) > 0 {
		fmt.Fprintln(w, "Retry-After (seconds: refusals)")
		for s := 1; s <= 60; s++ {
			if n := r.RetryAfter[s]; n > 0 {
				fmt.Fprintf(w, "  %2d: %d\n", s, n)
			}
		}
	}
}

// SVG draws two panels: arrivals per second split into admitted at once
// (blue), admitted after a wait (green) and refused (red), against offered
// (dashed grey) and the sustained request figure (dotted); and the
// requests in flight against the concurrency figure.
func (r *FlowResult) SVG() string {
	const w, panelH, pad = 760, 220, 50
	var b strings.Builder
	h := 2*panelH + 3*pad + 20
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">%s</text>`+"\n", pad, escape(r.Title))
	width := max(1, (r.Seconds+59)/60)
	type series struct {
		vals  []float64
		color string
		width float64
		dash  string
	}
	panel := func(top int, title string, ref float64, refLabel string, all []series) {
		maxY := ref * 1.2
		for i := range all {
			all[i].vals = rebin(all[i].vals, width)
			for _, v := range all[i].vals {
				maxY = math.Max(maxY, v)
			}
		}
		maxY = niceCeil(math.Max(maxY, 0.1))
		x0, y0, pw := pad, top+panelH, w-2*pad
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x0, top-8, escape(title))
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, y0, x0+pw, y0)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, top, x0, y0)
		for i := 0; i <= 4; i++ {
			y := y0 - i*panelH/4
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", x0-4, y+4, trim(maxY*float64(i)/4))
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#eee"/>`+"\n", x0+1, y, x0+pw, y)
		}
		n := len(all[0].vals)
		for i := 0; i <= 6 && n > 0; i++ {
			bin := i * n / 6
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%ds</text>`+"\n", x0+pw*bin/max(n, 1), y0+16, bin*width)
		}
		if ref > 0 {
			ys := float64(y0) - float64(panelH)*ref/maxY
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#d29922" stroke-dasharray="2,3"/>`+"\n", x0, ys, x0+pw, ys)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#d29922" text-anchor="end">%s</text>`+"\n", x0+pw, ys-4, escape(refLabel))
		}
		for _, s := range all {
			var pts []string
			for i, v := range s.vals {
				x := float64(x0) + float64(pw)*(float64(i)+0.5)/float64(max(n, 1))
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, float64(y0)-float64(panelH)*v/maxY))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" stroke-dasharray="%s" points="%s"/>`+"\n", s.color, s.width, s.dash, strings.Join(pts, " "))
		}
	}
	panel(pad+20, fmt.Sprintf("arrivals per second (%ds averages)", width), float64(r.Limits.RequestsPerMinute)/60, "sustained figure", []series{
		{r.OfferedRPS, "#666", 1.5, "6,4"}, {r.NowRPS, "#1f6feb", 2.5, "none"}, {r.WaitedRPS, "#1a7f37", 2.5, "none"}, {r.RefusedRPS, "#cf222e", 2, "none"},
	})
	panel(2*pad+panelH+40, fmt.Sprintf("requests in flight, waiting ones included (%ds averages)", width), float64(r.Limits.ConcurrentRequests), "concurrency figure", []series{
		{r.InFlight, "#8250df", 2.5, "none"},
	})
	legend := []struct{ text, color string }{{"offered", "#666"}, {"admitted at once", "#1f6feb"}, {"waited", "#1a7f37"}, {"refused", "#cf222e"}}
	for i, l := range legend {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", pad+i*140, pad+panelH+60, l.color, l.text)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
