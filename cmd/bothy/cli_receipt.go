package main

import (
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/receipt"
)

const receiptUsage = "bothy receipt get CMD_ID|LEASE_ID, or bothy receipt verify [--key FILE|BASE64] FILE"

// receipt runs "bothy receipt get" and "bothy receipt verify".
func (c *cli) receipt(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return bothy.Errorf(bothy.EINVALID, "usage: %s", receiptUsage)
	}
	switch args[0] {
	case "get":
		return c.receiptGet(ctx, args[1:])
	case "verify":
		return c.receiptVerify(ctx, args[1:])
	}
	return bothy.Errorf(bothy.EINVALID, "unknown receipt verb %q; usage: %s", args[0], receiptUsage)
}

// receiptGet prints the receipt of a command (cmd_…) or a lease (lse_…)
// exactly as the server signed it, so that the output verifies.
func (c *cli) receiptGet(ctx context.Context, args []string) error {
	var rf remoteFlags
	fs := flag.NewFlagSet("receipt get", flag.ContinueOnError)
	cl, args, err := c.verb(fs, &rf, args, -1, "bothy receipt get CMD_ID|LEASE_ID", nArgs(1))
	if err != nil {
		return err
	}
	get := cl.CommandReceipt
	if strings.HasPrefix(args[0], "lse_") {
		get = cl.LeaseReceipt
	}
	b, err := get(ctx, args[0])
	if err != nil {
		return err
	}
	_, err = c.out.Write(b)
	return err
}

// receiptVerify verifies a receipt file ("-": standard input) against
// --key or the key the server at BOTHY_URL publishes (which needs no
// token). It prints what the receipt is evidence of and exits 0, or names
// what failed and exits 1.
func (c *cli) receiptVerify(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("receipt verify", flag.ContinueOnError)
	keyArg := fs.String("key", "", "public key: a file (PEM, the JSON of /v1/receipts/key, or base64) or the base64 of the key (default: the server's published key)")
	url := fs.String("url", "", "API server URL whose published key to use (default: env BOTHY_URL)")
	fs.SetOutput(c.err)
	usage := "bothy receipt verify [--key FILE|BASE64] FILE"
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n", usage)
		fs.PrintDefaults()
	}
	args, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	} else if len(args) != 1 {
		return bothy.Errorf(bothy.EINVALID, "usage: %s", usage)
	}
	var doc []byte
	if args[0] == "-" {
		doc, err = io.ReadAll(io.LimitReader(c.in, 1<<20))
	} else {
		doc, err = os.ReadFile(args[0])
	}
	if err != nil {
		return fmt.Errorf("read receipt: %w", err)
	}
	pub, source, err := verificationKey(ctx, *keyArg, *url)
	if err != nil {
		return err
	}
	b, err := receipt.Verify(doc, pub)
	if err != nil {
		return fmt.Errorf("receipt %s does not verify with %s: %w", args[0], source, err)
	}
	subject := b.CommandID
	if b.Kind == bothy.ReceiptLease {
		subject = b.LeaseID
	}
	fmt.Fprintf(c.out, "valid: %s %s receipt %s, signed by %s\n", b.Kind, subject, b.ID, b.KeyID)
	return nil
}

// verificationKey returns the key named by --key (a file, else base64), or
// the one the server at url (default BOTHY_URL) publishes, and says which.
func verificationKey(ctx context.Context, keyArg, url string) (ed25519.PublicKey, string, error) {
	if keyArg != "" {
		b, err := os.ReadFile(keyArg)
		if err != nil {
			b = []byte(keyArg) // not a file: the key itself
		}
		pub, err := receipt.ParsePublicKey(b)
		if err != nil {
			return nil, "", fmt.Errorf("--key is neither a key file nor a base64 key: %w", err)
		}
		return pub, "key " + receipt.KeyID(pub), nil
	}
	if url == "" {
		url = os.Getenv("BOTHY_URL")
	}
	if url == "" {
		return nil, "", bothy.Errorf(bothy.EINVALID, "no key: pass --key, or set BOTHY_URL (or --url) to use the server's published key")
	}
	k, err := bhttp.NewClient(url, "").ReceiptKey(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("get the server's receipt key: %w", err)
	}
	pub := ed25519.PublicKey(k.PublicKey)
	if k.Algorithm != receipt.Algorithm || len(pub) != ed25519.PublicKeySize {
		return nil, "", fmt.Errorf("the server publishes a %q key of %d bytes, not a %d-byte %s key", k.Algorithm, len(pub), ed25519.PublicKeySize, receipt.Algorithm)
	} else if receipt.KeyID(pub) != k.KeyID {
		return nil, "", fmt.Errorf("the server publishes key id %q for a key whose id is %q", k.KeyID, receipt.KeyID(pub))
	}
	return pub, "the key of " + url + " (" + k.KeyID + ")", nil
}
