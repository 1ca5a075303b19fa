package http

import (
	_ "embed"
	nethttp "net/http"

	"github.com/bothyhq/bothy"
)

// openAPI is the OpenAPI 3.1 document of the API. It is written by hand;
// a test fails when its paths and the route table differ.
//
//go:embed openapi.json
var openAPI []byte

func (s *Server) handleOpenAPI(w nethttp.ResponseWriter, r *nethttp.Request, _ *bothy.Principal) error {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPI)
	return nil
}
