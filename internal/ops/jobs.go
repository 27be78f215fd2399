package ops

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// TenantSubjects returns the subject filters that match a tenant's jobs
// among subjects (THROTTLER_SUBJECTS) when the tenant is the token-th token
// of a job's subject (THROTTLER_TENANT_FROM=subject:N), and false when
// they cannot be told (a subject whose token there is a literal of another
// tenant is left out; one ending in ">" before the token, such as jobs.>
// with subject:3, cannot be narrowed to a tenant).
func TenantSubjects(subjects []string, token int, tenant string) ([]string, bool) {
	var filters []string
	for _, s := range subjects {
		toks := strings.Split(s, ".")
		i := token - 1
		switch {
		case i >= len(toks):
			if toks[len(toks)-1] == ">" {
				return nil, false
			}
		case toks[i] == "*":
			toks[i] = tenant
			filters = append(filters, strings.Join(toks, "."))
		case toks[i] == ">":
			base := strings.Join(append(toks[:i:i], tenant), ".")
			filters = append(filters, base, base+".>")
		case toks[i] == tenant:
			filters = append(filters, s)
		}
	}
	return filters, true
}

// StoredJobs counts the messages stream holds on subjects filters match.
// A stream that keeps acked jobs (limits retention, the default) counts
// every job it still holds, run or not.
func StoredJobs(ctx context.Context, js jetstream.JetStream, stream string, filters []string) (int, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	total := 0
	for _, f := range filters {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(f))
		if err != nil {
			return 0, fmt.Errorf("stream %s info: %w", stream, err)
		}
		for _, n := range info.State.Subjects {
			total += int(n)
		}
	}
	return total, nil
}
