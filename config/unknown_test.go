package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestUnknownNamesTheClosestVariable checks that a THROTTLER_ variable the
// worker does not read is reported with the variable that was meant, and
// that other variables are left alone.
func TestUnknownNamesTheClosestVariable(t *testing.T) {
	ps := Unknown(map[string]string{
		"THROTTLER_DEFAULT_LIMITS": "5/s",
		"THROTTLER_CONCURENCY":     "8",
		"THROTTLER_DEFAULT_LIMIT":  "5/s",
		"NATS_URL":                 "nats://x:4222",
		"HOME":                     "/root",
	})
	want := []string{
		"THROTTLER_CONCURENCY: no such variable (did you mean THROTTLER_CONCURRENCY?)",
		"THROTTLER_DEFAULT_LIMITS: no such variable (did you mean THROTTLER_DEFAULT_LIMIT?)",
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.Error())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Unknown = %q, want %q", got, want)
	}
}

// TestKnownComesFromTheStruct checks that Known lists every env tag of
// Config, so that a new field is known without a list to keep.
func TestKnownComesFromTheStruct(t *testing.T) {
	known := Known()
	typ := reflect.TypeFor[Config]()
	n := 0
	for i := range typ.NumField() {
		tag, ok := typ.Field(i).Tag.Lookup("env")
		if !ok {
			continue
		}
		n++
		name, _, _ := strings.Cut(tag, ",")
		if !slices.Contains(known, name) {
			t.Errorf("Known lacks %s", name)
		}
	}
	if len(known) != n || !slices.Contains(known, "THROTTLER_DEFAULT_LIMIT") {
		t.Fatalf("Known = %d names, want the %d env tags", len(known), n)
	}
	if len(Unknown(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1/s", "THROTTLER_HTTP_HEADERS": "a=b"})) != 0 {
		t.Fatal("known variables reported as unknown")
	}
}
