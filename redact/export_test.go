package redact

// Forms exposes the patterns of one value to the black-box tests, which
// check the Writer against a naive reference.
var Forms = forms
