package bothy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
)

func TestRunSpec_Validate(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		s := bothy.RunSpec{Argv: []string{"echo", "hi"}, Cwd: "src", Env: map[string]string{"A": "1"},
			Secrets: map[string]string{"TOKEN": "long-value"}, SecretFiles: map[string]string{"KEY_FILE": "file-value"}, TimeoutMS: 1000}
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		for name, s := range map[string]bothy.RunSpec{
			"neither argv nor script": {},
			"argv and script":         {Argv: []string{"true"}, Script: "true"},
			"empty program":           {Argv: []string{""}},
			"nul in argv":             {Argv: []string{"echo", "a\x00b"}},
			"nul in script":           {Script: "echo \x00"},
			"negative timeout":        {Script: "true", TimeoutMS: -1},
			"negative limit":          {Script: "true", Limits: bothy.Limits{Pids: -1}},
			"bad env name":            {Script: "true", Env: map[string]string{"A=B": "1"}},
			"nul in env value":        {Script: "true", Env: map[string]string{"A": "a\x00"}},
			"env and secret":          {Script: "true", Env: map[string]string{"A": "1"}, Secrets: map[string]string{"A": "long-value"}},
			"secret and secret file":  {Script: "true", Secrets: map[string]string{"A": "long-value"}, SecretFiles: map[string]string{"A": "long-value"}},
			"secret not utf-8":        {Script: "true", Secrets: map[string]string{"A": "long\xff"}},
		} {
			if err := s.Validate(); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("%s: %v, want EINVALID", name, err)
			}
		}
	})
	t.Run("ErrInvalidPath", func(t *testing.T) {
		for _, cwd := range []string{"/etc", "../x", "a/../../b"} {
			s := bothy.RunSpec{Script: "true", Cwd: cwd}
			if err := s.Validate(); bothy.ErrorCode(err) != bothy.EINVALIDPATH {
				t.Errorf("cwd %q: %v, want EINVALIDPATH", cwd, err)
			}
		}
	})
	t.Run("ErrTooLarge", func(t *testing.T) {
		for name, s := range map[string]bothy.RunSpec{
			"stdin":     {Script: "cat", Stdin: make([]byte, bothy.MaxStdinBytes+1)},
			"arguments": {Argv: make([]string, bothy.MaxCommandArgs+1)},
			"bytes":     {Script: strings.Repeat("x", bothy.MaxCommandBytes+1)},
		} {
			if name == "arguments" {
				for i := range s.Argv {
					s.Argv[i] = "x"
				}
			}
			if err := s.Validate(); bothy.ErrorCode(err) != bothy.ETOOLARGE {
				t.Errorf("%s: %v, want ETOOLARGE", name, err)
			}
		}
	})
}

// TestRunRequest_Validate checks that the API's check is the runtime's:
// what a run request may not hold, neither may its spec nor its ExecSpec.
func TestRunRequest_Validate(t *testing.T) {
	for name, r := range map[string]bothy.RunRequest{
		"nul in argv":  {Argv: []string{"a\x00"}},
		"escaping cwd": {Script: "true", Cwd: "../x"},
		"bad env name": {Script: "true", Env: map[string]string{"1A": "x"}},
	} {
		spec := r.Spec()
		exec := spec.ExecSpec()
		if err := r.Validate(); err == nil {
			t.Errorf("%s: the run request is valid", name)
		} else if err2 := spec.Validate(); bothy.ErrorCode(err2) != bothy.ErrorCode(err) {
			t.Errorf("%s: the request's error is %v, its spec's %v", name, err, err2)
		} else if err3 := exec.Validate(); bothy.ErrorCode(err3) != bothy.ErrorCode(err) {
			t.Errorf("%s: the request's error is %v, its ExecSpec's %v", name, err, err3)
		}
	}
}

func TestRunSpec_ExecSpec(t *testing.T) {
	s := bothy.RunSpec{Script: "true", Cwd: "src", Env: map[string]string{"A": "1"}, Secrets: map[string]string{"S": "long-value"},
		SecretFiles: map[string]string{"F": "file-value"}, TimeoutMS: 1500, Limits: bothy.Limits{Pids: 10}}
	e := s.ExecSpec()
	if e.Script != "true" || e.Cwd != "src" || e.Timeout != 1500*time.Millisecond || e.Limits.Pids != 10 || e.SecretFiles["F"] != "file-value" {
		t.Fatalf("ExecSpec: %+v", e)
	}
	if len(e.Env) != 2 || e.Env["A"] != "1" || e.Env["S"] != "long-value" {
		t.Fatalf("ExecSpec env: %v, want env and secrets", e.Env)
	}
	e.Env["MARK"] = "x"
	if _, ok := s.Env["MARK"]; ok {
		t.Fatal("ExecSpec's env is the spec's map: adding to it changed the spec")
	}
}
