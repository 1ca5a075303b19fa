package bothy

import (
	"context"
	"strings"
)

// MaxSecretBytes bounds one secret value.
const MaxSecretBytes = 64 << 10

// SecretService hands out a tenant's secret values by name. Commands get
// them in their environment, per command (see SecretRef); they are never
// stored with a computer, a checkpoint or a command's record, and their
// values are redacted from the command's output.
type SecretService interface {
	// Secret returns the value of the tenant's secret name, at most
	// MaxSecretBytes. A missing secret, or a tenant that has none, is
	// ENOTFOUND; a secret of another tenant is never returned. A name or
	// tenant id that is not valid (ValidateSecretName, ValidateID) is
	// EINVALID. The returned slice is the caller's.
	Secret(ctx context.Context, tenantID, name string) ([]byte, error)
}

// ValidateSecretName checks a secret's name: 1 to 128 letters, digits,
// '_', '-' and '.', not starting with '.' or '-' (the rule of ValidateID
// and of "secret:NAME" scopes), so that a name is also a safe file name.
func ValidateSecretName(name string) error {
	return ValidateID("secret name", name)
}

// SecretRef is a secret a command asks for.
type SecretRef struct {
	// Name is the secret's name in the tenant's SecretService.
	Name string `json:"name"`
	// Env is the environment variable that gets the value; Normalize sets
	// it from Name when it is empty.
	Env string `json:"env"`
	// File gives the secret as a file: Env then holds the file's path
	// (/dev/fd/N, readable by the command's processes only), not the
	// value. Not every provider can (gvisor cannot).
	File bool `json:"file,omitempty"`
}

// Normalize fills in the default Env: Name upper-cased, with every
// character that is not a letter or digit replaced by '_', and a leading
// '_' when Name starts with a digit ("gh-token" → "GH_TOKEN", "1pw" →
// "_1PW").
func (r *SecretRef) Normalize() {
	if r.Env != "" {
		return
	}
	var b strings.Builder
	for i := 0; i < len(r.Name); i++ {
		c := r.Name[i]
		switch {
		case c >= 'a' && c <= 'z':
			b.WriteByte(c - 'a' + 'A')
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			if i == 0 && c <= '9' {
				b.WriteByte('_')
			}
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	r.Env = b.String()
}

// Validate reports whether r names a valid secret and environment
// variable. Call Normalize first for the default Env.
func (r *SecretRef) Validate() error {
	if err := ValidateSecretName(r.Name); err != nil {
		return err
	}
	return validateEnvName(r.Env)
}
