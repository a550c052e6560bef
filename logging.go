package llmrate

import "go.uber.org/zap"

func fieldsRefused(a *admission, secs int64) []zap.Field {
	return []zap.Field{
		zap.String("key_fp", Fingerprint(a.key)),
		zap.Stringer("tier", a.tier),
		zap.String("plan", a.plan),
		zap.Stringer("bucket", a.d.Refused),
		zap.Int64("estimate", a.est),
		zap.Int64("retry_after_s", secs),
		zap.Bool("never_fits", a.d.NeverFits),
		zap.String("model_limit", a.entry),
	}
}
