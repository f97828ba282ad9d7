package jsontype_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/ralphmesh/ralph/pkg/jsontype"
)

func TestOf(t *testing.T) {
	for raw, want := range map[string]string{
		` {"a":1}`: "object", `[1]`: "array", `"x"`: "string", `true`: "boolean", `false`: "boolean",
		`null`: "null", `-3.5`: "number", ``: "nothing", "  \n": "nothing",
	} {
		if got := jsontype.Of([]byte(raw)); got != want {
			t.Errorf("Of(%q) = %s, want %s", raw, got, want)
		}
	}
}

func TestFor(t *testing.T) {
	for v, want := range map[any]string{
		0: "integer", uint8(0): "integer", 1.5: "number", "": "string", true: "boolean",
		[2]int{}: "array", struct{}{}: "object", complex(1, 2): "complex128",
	} {
		if got := jsontype.For(reflect.TypeOf(v)); got != want {
			t.Errorf("For(%T) = %s, want %s", v, got, want)
		}
	}
	if got := jsontype.For(reflect.TypeOf([]string{})); got != "array" {
		t.Errorf("slice: %s", got)
	}
	if got := jsontype.For(reflect.TypeOf(map[string]int{})); got != "object" {
		t.Errorf("map: %s", got)
	}
}

func TestFieldError(t *testing.T) {
	var rec struct {
		Iteration int `json:"iteration"`
	}
	err := json.Unmarshal([]byte(`{"iteration": "two"}`), &rec)
	if got := jsontype.FieldError(err, "").Error(); got != "field iteration: want integer, got string" {
		t.Errorf("named by the decoder: %q", got)
	}
	var n int
	err = json.Unmarshal([]byte(`"x"`), &n)
	if got := jsontype.FieldError(err, "tokens").Error(); got != "field tokens: want integer, got string" {
		t.Errorf("named by the caller: %q", got)
	}
	if got := jsontype.FieldError(err, "").Error(); got != "want integer, got string" {
		t.Errorf("unnamed: %q", got)
	}
	other := errors.New("unexpected end of JSON input")
	if jsontype.FieldError(other, "f") != other {
		t.Error("another error is not returned as it is")
	}
}
