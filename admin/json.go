package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
)

// maxBody caps a request's body: the API takes small JSON documents.
const maxBody = 1 << 20

// errTooLarge says a request's body is over maxBody.
var errTooLarge = errors.New("request body too large")

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

// apiError is every error's body.
type apiError struct {
	Error string `json:"error"`
}

// writeError answers msg as a JSON error with status.
func writeError(w http.ResponseWriter, status int, msg string) {
	_ = writeJSON(w, status, apiError{Error: msg})
}

// readJSON decodes r's body into v, refusing unknown fields; an empty
// body leaves v as it is.
func readJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var tooLarge *http.MaxBytesError
	var wrongType *json.UnmarshalTypeError
	switch {
	case err == nil, errors.Is(err, io.EOF):
		return nil
	case errors.As(err, &tooLarge):
		return fmt.Errorf("%w: over %d bytes", errTooLarge, maxBody)
	case errors.As(err, &wrongType) && wrongType.Field != "":
		// Said in the API's terms, not the Go types it is read into.
		return fmt.Errorf("%w: field %s: want %s, got a JSON %s", ErrBadInput, wrongType.Field, jsonKind(wrongType.Type.Kind()), wrongType.Value)
	}
	return fmt.Errorf("%w: the body is not the JSON expected: %v", ErrBadInput, err)
}

// jsonKind names the JSON value a Go kind is read from.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "an object"
}

// logJSON is v as the JSON the API answers, for a log line: the results
// of the operations hold pointers, which a log would show as addresses.
func logJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("(%T, not shown: %v)", v, err)
	}
	return string(b)
}
