package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
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
