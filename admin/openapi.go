package admin

import (
	_ "embed"
	"net/http"
)

// openAPIDoc documents the API (OpenAPI 3.0); openapi_test.go checks it
// against the routes and the handlers' answers.
//
//go:embed openapi.json
var openAPIDoc []byte

// openAPI answers GET /openapi.json.
func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(openAPIDoc)
	return err
}
