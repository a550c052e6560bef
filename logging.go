package llmrate

import "go.uber.org/zap"

func fieldsRefused(a *admission, secs int64) []zap.Field {
	return []zap.Field{
		zap.String("key_fp", Fingerprint(a.key)),
		planField(a),
		zap.Stringer("bucket", a.d.Refused),
		zap.Int64("estimate", a.est),
		zap.Int64("retry_after_s", secs),
		zap.Bool("never_fits", a.d.NeverFits),
		zap.String("model_limit", a.entry),
	}
}

// planField names the request's figures in a log line: its tier ("tier")
// without WithPlans, its plan ("plan") under it ("" when not known).
func planField(a *admission) zap.Field {
	if a.named || a.tier == Free && a.plan != Free.String() {
		return zap.String("plan", a.plan)
	}
	return zap.Stringer("tier", a.tier)
}
