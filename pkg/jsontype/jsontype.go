// Package jsontype owns how decode errors talk about types: in JSON's words
// (object, array, string, number, boolean, null), because the person who
// wrote the input wrote JSON and should not need to read Go type names.
package jsontype

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// Of names the JSON value raw holds, judged by its first byte after
// whitespace.
func Of(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// For names the JSON a Go type is decoded from.
func For(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return t.String()
}

// FieldError rewrites a *json.UnmarshalTypeError as "field F: want T, got
// V" with field (when the error names none, e.g. a value decoded on its
// own). Any other error is returned as it is.
func FieldError(err error, field string) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err
	}
	if te.Field != "" {
		field = te.Field
	}
	if field == "" {
		return fmt.Errorf("want %s, got %s", For(te.Type), te.Value)
	}
	return fmt.Errorf("field %s: want %s, got %s", field, For(te.Type), te.Value)
}
