package upstream

import (
	"context"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/usage"
)

// reservation is one admission on a key: its estimate, debited, waiting to
// be replaced by the charge (or refunded) exactly once.
type reservation struct {
	t       *Transport
	k       *key
	ctx     context.Context // the request's, for its values; never its cancellation
	id      string
	receipt string
	est     int64
	input   int64 // what admission debited the input meters
	// in and out are the charges of the key's input and output meters
	// (windows): the reported input less cache reads (else the estimate)
	// and the reported output (or the generated text's bytes ÷ 4); set by
	// settle, else the estimate and 0.
	in, out int64
}

// settle replaces the estimate by the charge for a response whose body
// held r (the charge rule of docs/cost.md "Estimate and reconcile", usage.Result.Charge); cut: the body was not
// read to its end.
func (res *reservation) settle(r usage.Result, cut bool) {
	cut = cut || r.Cut()
	res.in, res.out = res.input, 0
	if r.Complete(cut) {
		res.in, res.out = r.Usage.InputTokens-r.Usage.CachedInputTokens, r.Usage.OutputTokens
	} else {
		if r.InputReported {
			res.in = r.Usage.InputTokens - r.Usage.CachedInputTokens
		}
		res.out = max(r.Usage.OutputTokens, r.GeneratedBytes/4)
	}
	res.apply(r.Charge(res.est, cut), false, ReconcileEvent{Kind: reconcileKind(r, cut), Cut: cut, Reported: r.Usage})
}

// settleError charges the estimate for an attempt that failed after the
// provider saw the request.
func (res *reservation) settleError() {
	if res != nil {
		res.apply(res.est, false, ReconcileEvent{Kind: llmrate.ReconcileEstimated, Cut: true})
	}
}

// settleUpgrade charges the estimate for a response that switched
// protocols (101, a WebSocket such as a realtime API): what flows on the
// upgraded connection is not HTTP and reports no usage this Transport can
// read, so the estimate is the charge, settled at once.
func (res *reservation) settleUpgrade() {
	if res != nil {
		res.apply(res.est, false, ReconcileEvent{Kind: llmrate.ReconcileEstimated})
	}
}

// refund credits the reservation back in full: the request never reached
// the provider. A nil reservation (the key used unchecked) has nothing to
// refund.
func (res *reservation) refund() {
	if res != nil {
		res.apply(0, true, ReconcileEvent{Kind: llmrate.ReconcileEstimated})
	}
}

// apply replaces the estimate by actual (or refunds it): a reconcile that
// carries the admission's ID and receipt, retried if the store fails (see
// Transport.Close).
func (res *reservation) apply(actual int64, refund bool, ev ReconcileEvent) {
	t, k := res.t, res.k
	ev.Key, ev.Estimate, ev.Actual, ev.Refund = k.Name, res.est, actual, refund
	t.reconcile(retryJob{ctx: res.ctx, ev: ev, req: llmrate.ReconcileRequest{
		Key: k.ws, Workspace: k.ws, KeyLimits: k.lim, WorkspaceLimits: k.lim,
		Estimate: res.est, Actual: actual, Solo: true, Now: t.clock(),
		ID: res.id, Receipt: res.receipt, Refund: refund,
		InputEstimate: res.input, InputActual: max(0, res.in), OutputActual: max(0, res.out),
	}})
}
