package bothy_test

import (
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
)

func TestValidateSecretName(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		for _, name := range []string{"a", "GH_TOKEN", "npm.token-2", "_x", strings.Repeat("s", 128)} {
			if err := bothy.ValidateSecretName(name); err != nil {
				t.Errorf("%q: %v", name, err)
			}
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		for _, name := range []string{"", ".", "..", ".env", "-x", "a/b", "../a", "a b", "a\x00", "é", strings.Repeat("s", 129)} {
			if err := bothy.ValidateSecretName(name); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("%q: %v, want EINVALID", name, err)
			}
		}
	})
}

func TestSecretRef_Normalize(t *testing.T) {
	for _, tt := range []struct{ name, env, want string }{
		{"gh-token", "", "GH_TOKEN"},
		{"npm.Token_2", "", "NPM_TOKEN_2"},
		{"1pw", "", "_1PW"},
		{"gh", "MY_GH", "MY_GH"},
	} {
		r := bothy.SecretRef{Name: tt.name, Env: tt.env}
		r.Normalize()
		if r.Env != tt.want {
			t.Errorf("Normalize(%q, %q) = %q, want %q", tt.name, tt.env, r.Env, tt.want)
		}
		if err := r.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", r, err)
		}
	}
}

func TestSecretRef_Validate(t *testing.T) {
	for _, r := range []bothy.SecretRef{
		{Name: "", Env: "X"},
		{Name: "../x", Env: "X"},
		{Name: "gh", Env: ""},
		{Name: "gh", Env: "1X"},
		{Name: "gh", Env: "A-B"},
		{Name: "gh", Env: "A=B"},
	} {
		if err := r.Validate(); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Errorf("Validate(%+v) = %v, want EINVALID", r, err)
		}
	}
}
