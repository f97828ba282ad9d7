// Package settings makes a package's envconfig tags the one home of its
// defaults. Each package with knobs (a service, the bus, the LLM client, the
// store, the planner) declares one Config struct whose fields carry
// envconfig's `default` and `desc` tags; pkg/config nests those structs to
// read RALPH_* variables, and code that needs the defaults without an
// environment (a package's own New, its tests, a CLI tool) gets them here,
// parsed from the same tags, so that no number is written twice.
//
// It also carries the one error type a Config.Validate returns, naming the
// Go field so that the loader can name the variable the value came from,
// and the one rule for showing a URL setting without its credentials
// (MaskURL), which the loader, the bus and the CLI all print through.
package settings

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/kelseyhightower/envconfig"
)

// noEnvPrefix is a prefix no variable carries, so envconfig applies only
// the default tags.
const noEnvPrefix = "RALPH_SETTINGS_DEFAULTS_ONLY_NOT_SET"

// Defaults returns a T with every field that has a `default` tag set to it,
// whatever the environment holds, parsed exactly as envconfig parses the
// variable. Fields without a default are zero.
//
// It panics on a malformed tag or an `envconfig` tag: defaults are
// constants, a bad one is a programming error that every test of the
// package meets at once, and an `envconfig` tag would let envconfig read a
// bare variable (USER, URL...) in place of the prefixed one.
func Defaults[T any]() T {
	var v T
	if err := checkTags(reflect.TypeOf(v)); err != nil {
		panic(fmt.Sprintf("settings: %T: %v", v, err))
	}
	if err := envconfig.Process(noEnvPrefix, &v); err != nil {
		panic(fmt.Sprintf("settings: %T: default tag: %v", v, err))
	}
	return v
}

// FillZero sets each field of *p that has a `default` tag and is zero to
// its default: a Config built in code that sets only what it overrides
// still gets the documented values.
func FillZero[T any](p *T) {
	fillZero(reflect.ValueOf(p).Elem(), reflect.ValueOf(Defaults[T]()))
}

func fillZero(dst, def reflect.Value) {
	t := dst.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Tag.Get("ignored") == "true" {
			continue
		}
		d, v := dst.Field(i), def.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Tag.Get("default") == "" {
			fillZero(d, v)
			continue
		}
		if f.Tag.Get("default") != "" && d.IsZero() {
			d.Set(v)
		}
	}
}

// checkTags refuses `envconfig` tags anywhere in t, for the reason Defaults
// gives.
func checkTags(t reflect.Type) error {
	if t.Kind() != reflect.Struct {
		return errors.New("not a struct")
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Tag.Get("ignored") == "true" {
			continue
		}
		if _, ok := f.Tag.Lookup("envconfig"); ok {
			return fmt.Errorf("field %s: an envconfig tag makes envconfig fall back to the unprefixed variable; name the field instead", f.Name)
		}
		if f.Type.Kind() == reflect.Struct && f.Tag.Get("default") == "" {
			if err := checkTags(f.Type); err != nil {
				return fmt.Errorf("%s.%w", f.Name, err)
			}
		}
	}
	return nil
}

// Invalid is a setting whose value cannot mean anything. Field is the Go
// field name in the Config that Validate was called on; the loader turns it
// into the variable's name and shows Value as the variable's value.
type Invalid struct {
	Field  string
	Value  any
	Reason string
}

func (e *Invalid) Error() string { return fmt.Sprintf("%s: %s, got %v", e.Field, e.Reason, e.Value) }

// Check returns an *Invalid for field when ok is false, else nil, so that a
// Validate method reads as a list of rules.
func Check(ok bool, field string, value any, format string, a ...any) error {
	if ok {
		return nil
	}
	return &Invalid{Field: field, Value: value, Reason: fmt.Sprintf(format, a...)}
}

// Join joins the errors that are not nil. Unlike errors.Join it keeps them
// on one line, as a CLI prints them; errors.Is and errors.As still see
// each one.
func Join(errs ...error) error {
	var kept []error
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return joined(kept)
}

type joined []error

func (j joined) Error() string {
	s := make([]string, len(j))
	for i, err := range j {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

func (j joined) Unwrap() []error { return j }

// Each calls f for every *Invalid in err's tree, in order.
func Each(err error, f func(*Invalid)) {
	if inv, ok := err.(*Invalid); ok {
		f(inv)
		return
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			Each(e, f)
		}
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil {
			Each(e, f)
		}
	}
}
