package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/caarlos0/env/v10"
)

// Problem is one thing wrong with one variable.
type Problem struct {
	// Var is the variable's name.
	Var string
	// Text says what is wrong and what the variable accepts.
	Text string
}

// Error formats p as "VAR: text".
func (p Problem) Error() string { return p.Var + ": " + p.Text }

// Problems are every problem found in a configuration.
type Problems []Problem

// Err joins the problems into one error, one line each, or returns nil
// when there are none.
func (ps Problems) Err() error {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// Has reports whether variable name has a problem.
func (ps Problems) Has(name string) bool {
	for _, p := range ps {
		if p.Var == name {
			return true
		}
	}
	return false
}

// Load reads the configuration from the process environment and checks
// it. On failure it returns nil and an error listing every problem found.
func Load() (*Config, error) {
	return LoadFrom(env.ToMap(os.Environ()))
}

// LoadFrom is Load reading the variables from vars instead of the process
// environment; a variable missing from vars, or empty, takes its default.
func LoadFrom(vars map[string]string) (*Config, error) {
	c, problems := Parse(vars)
	if len(problems) > 0 {
		return nil, problems.Err()
	}
	return c, nil
}

// Parse reads and checks vars like LoadFrom, but returns the Config along
// with its problems, so that a caller checking more (internal/app) can
// report everything at once. A variable with a problem keeps its zero
// value or default.
func Parse(vars map[string]string) (*Config, Problems) {
	if vars == nil {
		vars = map[string]string{}
	}
	c := &Config{}
	var problems Problems
	failed := map[string]bool{}
	if err := env.ParseWithOptions(c, env.Options{Environment: vars}); err != nil {
		var agg env.AggregateError
		if !errors.As(err, &agg) {
			agg.Errors = []error{err}
		}
		keys := envKeys()
		for _, e := range agg.Errors {
			var pe env.ParseError
			if !errors.As(e, &pe) || keys[pe.Name] == "" {
				problems = append(problems, Problem{Var: "environment", Text: e.Error()})
				continue
			}
			name := keys[pe.Name]
			failed[name] = true
			problems = append(problems, Problem{Var: name, Text: parseProblem(name, pe.Type, vars[name])})
		}
	}
	problems = append(problems, c.check(failed)...)
	return c, problems
}

// parseProblem describes a value of variable name that the env library
// could not convert to type t.
func parseProblem(name string, t reflect.Type, raw string) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return fmt.Sprintf("must be %s, got %q", durWant(name), raw)
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return fmt.Sprintf("must be a whole number %s, got %q", intWant(name), raw)
	case t.Kind() == reflect.Bool:
		return fmt.Sprintf("must be true or false, got %q", raw)
	}
	return fmt.Sprintf("cannot read %q as %s", raw, t)
}

// envName returns the variable name of field f, or "" if it has none.
func envName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
	return name
}

// envKeys maps each Config field name to its variable name.
func envKeys() map[string]string {
	keys := map[string]string{}
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if name := envName(t.Field(i)); name != "" {
			keys[t.Field(i).Name] = name
		}
	}
	return keys
}

// Prefix starts the name of every variable of the worker's own; NATS_URL,
// REDIS_URL and the like are named after the server they configure.
const Prefix = "THROTTLER_"

// Known returns the name of every variable Config reads, from its env
// tags, in the order of its fields.
func Known() []string {
	var names []string
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if name := envName(t.Field(i)); name != "" {
			names = append(names, name)
		}
	}
	return names
}

// Unknown returns a problem for each variable of vars named with Prefix
// that Config does not read (a typo, or a variable of another version),
// naming the closest variable it does read, sorted by name. The worker
// ignores such a variable; check-config refuses it.
func Unknown(vars map[string]string) Problems {
	known := Known()
	isKnown := map[string]bool{}
	for _, k := range known {
		isKnown[k] = true
	}
	var ps Problems
	for name := range vars {
		if !strings.HasPrefix(name, Prefix) || isKnown[name] {
			continue
		}
		ps = append(ps, Problem{Var: name, Text: fmt.Sprintf("no such variable (did you mean %s?)", closest(name, known))})
	}
	slices.SortFunc(ps, func(a, b Problem) int { return strings.Compare(a.Var, b.Var) })
	return ps
}

// closest returns the name of names nearest to name in edit distance, the
// first of those at the same distance.
func closest(name string, names []string) string {
	best, bestD := "", -1
	for _, n := range names {
		if d := editDistance(name, n); bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes
// (variable names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Default returns the default of variable name, from Config's envDefault
// tags: "" for a variable without one or that Config does not read.
func Default(name string) string {
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if envName(t.Field(i)) == name {
			return t.Field(i).Tag.Get("envDefault")
		}
	}
	return ""
}
