package http_test

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	bhttp "github.com/bothyhq/bothy/http"
)

// TestOpenAPI_ErrorCodes fails when the OpenAPI document's Error schema
// does not list exactly the codes the server maps to a status.
func TestOpenAPI_ErrorCodes(t *testing.T) {
	b, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct {
									Enum []string `json:"enum"`
								} `json:"code"`
							} `json:"properties"`
						} `json:"error"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	documented := doc.Components.Schemas.Error.Properties.Error.Properties.Code.Enum
	var mapped []string
	for code := range bhttp.Statuses {
		mapped = append(mapped, code)
	}
	slices.Sort(documented)
	slices.Sort(mapped)
	if !slices.Equal(documented, mapped) {
		t.Errorf("openapi.json's error codes are %v; the server maps %v", documented, mapped)
	}
}
