package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
)

// cli runs the verbs that talk to a bothy server over its API, with the
// streams they read and write; tests give it buffers.
type cli struct {
	in       io.Reader
	out, err io.Writer
	// inTerminal reports that in is a terminal (or /dev/null), which run
	// does not read as the command's standard input.
	inTerminal bool
}

// remote adapts a cli verb to the verb table, over the process's streams.
func remote(verb func(*cli, context.Context, []string) error) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		fi, err := os.Stdin.Stat()
		c := &cli{in: os.Stdin, out: os.Stdout, err: os.Stderr, inTerminal: err != nil || fi.Mode()&os.ModeCharDevice != 0}
		return verb(c, ctx, args)
	}
}

// exitCode is the error of a verb that makes bothy exit with that status,
// having already said why (or with nothing to say, as grep finding nothing).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// remoteFlags are the flags of every verb over the API.
type remoteFlags struct {
	url, token string
	json       bool
}

// register adds the flags to fs. Their defaults come from the environment
// after parsing, so that -h never prints the token.
func (f *remoteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "url", "", "API server URL (default: env BOTHY_URL)")
	fs.StringVar(&f.token, "token", "", "API token (default: env BOTHY_TOKEN)")
	fs.BoolVar(&f.json, "json", false, "print JSON")
}

// client returns the API client the flags and environment name.
func (f *remoteFlags) client() (*bhttp.Client, error) {
	url, token := f.url, f.token
	if url == "" {
		url = os.Getenv("BOTHY_URL")
	}
	if token == "" {
		token = os.Getenv("BOTHY_TOKEN")
	}
	if url == "" {
		return nil, bothy.Errorf(bothy.EINVALID, "no server: set BOTHY_URL or pass --url (bothy serve prints both)")
	} else if token == "" {
		return nil, bothy.Errorf(bothy.EINVALID, "no token: set BOTHY_TOKEN or pass --token (bothy serve prints both)")
	}
	c := bhttp.NewClient(url, token)
	// BOTHY_CA names the certificates an https server's must chain to
	// (bothy serve --tls-self-signed prints it).
	hc, _, err := caClient(os.Getenv("BOTHY_CA"))
	if err != nil {
		return nil, err
	}
	c.HTTPClient = hc
	return c, nil
}

// parseArgs parses flags anywhere among the arguments, as people type them
// ("bothy get ID --json"). After stopAfter positional arguments (if not
// negative), one more run of flags is parsed and the rest is kept verbatim,
// so that "bothy run ID ls -la" passes -la to ls. "--" ends the flags.
func parseArgs(fs *flag.FlagSet, args []string, stopAfter int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		} else if len(rest) == 0 {
			return pos, nil
		} else if stopAfter >= 0 && len(pos) >= stopAfter {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// verb parses a remote verb's flags and arguments, checks them with ok,
// and returns its client.
func (c *cli) verb(fs *flag.FlagSet, rf *remoteFlags, args []string, stopAfter int, usage string, ok func([]string) bool) (*bhttp.Client, []string, error) {
	rf.register(fs)
	fs.SetOutput(c.err)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n", usage)
		fs.PrintDefaults()
	}
	args, err := parseArgs(fs, args, stopAfter)
	if err != nil {
		return nil, nil, err
	} else if !ok(args) {
		return nil, nil, bothy.Errorf(bothy.EINVALID, "usage: %s", usage)
	}
	cl, err := rf.client()
	return cl, args, err
}

func nArgs(n int) func([]string) bool { return func(a []string) bool { return len(a) == n } }

// printJSON writes v as one line of JSON.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func (c *cli) create(ctx context.Context, args []string) error {
	var rf remoteFlags
	var req bhttp.CreateComputerRequest
	fs := flag.NewFlagSet("create", flag.ContinueOnError)
	fs.StringVar(&req.Label, "label", "", "label")
	fs.StringVar(&req.Profile, "profile", "", "profile (default: standard)")
	fs.StringVar(&req.ConversationID, "conversation", "", "conversation id")
	fs.StringVar(&req.WorkJobID, "work-job", "", "external reference (work_job_id), stated in receipts")
	egress := fs.String("egress", "none", "what commands may reach: none, all, or allow=HOST:PORT,... (*.DOMAIN and port * allowed)")
	cl, _, err := c.verb(fs, &rf, args, -1, "bothy create [--label L] [--profile P] [--conversation C] [--work-job J] [--egress none|all|allow=HOST:PORT,...]", nArgs(0))
	if err != nil {
		return err
	}
	if req.Egress, err = parseEgressFlag(*egress); err != nil {
		return err
	}
	cm, err := cl.CreateComputer(ctx, req)
	if err != nil {
		return err
	} else if rf.json {
		return c.printJSON(cm)
	}
	_, err = fmt.Fprintln(c.out, cm.ID)
	return err
}

func (c *cli) list(ctx context.Context, args []string) error {
	var rf remoteFlags
	var f bothy.ComputerFilter
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	fs.StringVar(&f.ConversationID, "conversation", "", "only this conversation's computers")
	fs.StringVar(&f.Label, "label", "", "only computers with this label")
	fs.StringVar(&f.State, "state", "", "only computers in this state")
	fs.IntVar(&f.Limit, "limit", 0, "most computers to list (0: the server's default, 100)")
	cl, _, err := c.verb(fs, &rf, args, -1, "bothy ls [--conversation C] [--label L] [--state S]", nArgs(0))
	if err != nil {
		return err
	}
	cs, err := cl.ListComputers(ctx, f)
	if err != nil {
		return err
	} else if rf.json {
		if cs == nil {
			cs = []*bothy.Computer{}
		}
		return c.printJSON(bhttp.ComputerList{Computers: cs})
	}
	w := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATE\tPROFILE\tREVISION\tLABEL\tCONVERSATION\tCREATED")
	for _, cm := range cs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", cm.ID, cm.State, cm.Profile, cm.Revision, cm.Label, cm.ConversationID, when(cm.CreatedAt))
	}
	return w.Flush()
}

// when formats a time for a table.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

// computerVerb runs get, stop or destroy: one computer in, one out.
func (c *cli) computerVerb(ctx context.Context, name string, args []string, call func(*bhttp.Client, context.Context, string) (*bothy.Computer, error)) error {
	var rf remoteFlags
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cl, args, err := c.verb(fs, &rf, args, -1, "bothy "+name+" ID", nArgs(1))
	if err != nil {
		return err
	}
	cm, err := call(cl, ctx, args[0])
	if err != nil {
		return err
	} else if rf.json {
		return c.printJSON(cm)
	}
	w := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"id", cm.ID}, {"state", cm.State}, {"profile", cm.Profile}, {"label", cm.Label},
		{"conversation", cm.ConversationID}, {"work job", cm.WorkJobID}, {"owner", cm.Owner},
		{"generation", fmt.Sprint(cm.Generation)}, {"revision", fmt.Sprint(cm.Revision)},
		{"root", cm.RootDigest}, {"created", when(cm.CreatedAt)}, {"updated", when(cm.UpdatedAt)},
	} {
		fmt.Fprintf(w, "%s\t%s\n", kv[0], kv[1])
	}
	return w.Flush()
}

func (c *cli) get(ctx context.Context, args []string) error {
	return c.computerVerb(ctx, "get", args, (*bhttp.Client).FindComputer)
}

func (c *cli) stop(ctx context.Context, args []string) error {
	return c.computerVerb(ctx, "stop", args, (*bhttp.Client).StopComputer)
}

func (c *cli) destroy(ctx context.Context, args []string) error {
	return c.computerVerb(ctx, "destroy", args, (*bhttp.Client).DestroyComputer)
}

func (c *cli) revisions(ctx context.Context, args []string) error {
	var rf remoteFlags
	fs := flag.NewFlagSet("revisions", flag.ContinueOnError)
	limit := fs.Int("limit", 0, "most revisions to list (0: the server's default, 100)")
	cl, args, err := c.verb(fs, &rf, args, -1, "bothy revisions ID", nArgs(1))
	if err != nil {
		return err
	}
	revs, err := cl.ListRevisions(ctx, args[0], 0, *limit)
	if err != nil {
		return err
	} else if rf.json {
		if revs == nil {
			revs = []*bothy.Revision{}
		}
		return c.printJSON(bhttp.RevisionList{Revisions: revs})
	}
	w := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "REVISION\tCREATED\tFILES\tSIZE\tBY\tROOT")
	for _, r := range revs {
		fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%s\t%.16s\n", r.Number, when(r.CreatedAt), r.FileCount, r.Size, r.CreatedBy, r.RootDigest)
	}
	return w.Flush()
}

// envFlag collects repeated K=V flags.
type envFlag map[string]string

func (e envFlag) String() string { return "" }

func (e envFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", v)
	}
	e[k] = val
	return nil
}

// parseEgressFlag reads --egress: none, all, or allow=HOST:PORT,...
func parseEgressFlag(v string) (bothy.EgressPolicy, error) {
	var p bothy.EgressPolicy
	switch {
	case v == bothy.EgressNone || v == "":
		p.Mode = bothy.EgressNone
	case v == bothy.EgressAll:
		p.Mode = bothy.EgressAll
	case strings.HasPrefix(v, "allow="):
		p.Mode = bothy.EgressAllowlist
		for a := range strings.SplitSeq(strings.TrimPrefix(v, "allow="), ",") {
			if a = strings.TrimSpace(a); a != "" {
				p.Allow = append(p.Allow, a)
			}
		}
	default:
		return p, bothy.Errorf(bothy.EINVALID, "--egress %q: want none, all or allow=HOST:PORT,...", v)
	}
	return p, p.Validate()
}

// secretFlag collects --secret NAME[=VAR].
type secretFlag []bothy.SecretRef

func (s *secretFlag) String() string { return "" }

// secretFile collects --secret-file NAME[=VAR] into the same list.
type secretFile struct{ list *secretFlag }

func (s *secretFile) String() string { return "" }

func (s *secretFile) Set(v string) error {
	if err := s.list.Set(v); err != nil {
		return err
	}
	(*s.list)[len(*s.list)-1].File = true
	return nil
}

func (s *secretFlag) Set(v string) error {
	name, env, _ := strings.Cut(v, "=")
	ref := bothy.SecretRef{Name: name, Env: env}
	ref.Normalize()
	if err := ref.Validate(); err != nil {
		return err
	}
	*s = append(*s, ref)
	return nil
}
