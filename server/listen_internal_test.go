package server

import (
	"fmt"
	"testing"
)

// The control plane's URL names an address the agent's broker denies
// when its host is an IP address or localhost.
func TestURLListeners(t *testing.T) {
	for u, want := range map[string]string{
		"http://127.0.0.1:8080":        "[127.0.0.1:8080]",
		"http://[::1]:9000/":           "[[::1]:9000]",
		"http://[::ffff:127.0.0.1]:81": "[127.0.0.1:81]",
		"http://localhost:8080":        "[127.0.0.1:8080 [::1]:8080]",
		"http://10.1.2.3":              "[10.1.2.3:80]",
		"https://10.1.2.3":             "[10.1.2.3:443]",
		"http://control.example:8080":  "[]",
		"http://127.0.0.1:notaport":    "[]",
		"%":                            "[]",
	} {
		if got := fmt.Sprint(urlListeners(u)); got != want {
			t.Errorf("%s: %s, want %s", u, got, want)
		}
	}
}
