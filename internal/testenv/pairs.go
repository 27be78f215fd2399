package testenv

import (
	"slices"
	"testing"
)

// Median returns the median of xs (the upper one of an even count), or 0 for
// none. It does not change xs.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

// ReportRatios reports the median, lowest and highest of ratios measured in
// back-to-back pairs, as median-ratio, min-ratio and max-ratio.
func ReportRatios(b *testing.B, ratios []float64) {
	b.Helper()
	if len(ratios) == 0 {
		b.Fatal("no ratios measured")
	}
	b.ReportMetric(Median(ratios), "median-ratio")
	b.ReportMetric(slices.Min(ratios), "min-ratio")
	b.ReportMetric(slices.Max(ratios), "max-ratio")
}
