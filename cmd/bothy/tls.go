package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	nethttp "net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The self-signed CA of `bothy serve --tls-self-signed` lives in DATA/tls:
// ca.pem (give it to agents and clients: --ca-file, BOTHY_CA) and ca.key
// (0600, never leaves the directory). The server's certificate is issued
// from it at every start for the names it listens on.
const (
	tlsDir    = "tls"
	caCert    = "ca.pem"
	caKey     = "ca.key"
	leafLife  = 90 * 24 * time.Hour
	caLife    = 10 * 365 * 24 * time.Hour
	tlsPrefix = "bothy serve"
)

// selfSignedTLS returns a certificate for hosts issued by the CA of
// DATA/tls, creating the CA on first use, and the CA's fingerprint (the
// SHA-256 of its DER), which serve prints so that it can be checked.
func selfSignedTLS(data string, hosts []string) (tls.Certificate, string, error) {
	dir := filepath.Join(data, tlsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, "", err
	}
	ca, key, err := loadCA(dir)
	if errors.Is(err, os.ErrNotExist) {
		ca, key, err = newCA(dir)
	}
	if err != nil {
		return tls.Certificate{}, "", err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: tlsPrefix},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(leafLife),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &leafKey.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("issue the server's certificate: %w", err)
	}
	leaf, _ := x509.ParseCertificate(der)
	cert := tls.Certificate{Certificate: [][]byte{der, ca.Raw}, PrivateKey: leafKey, Leaf: leaf}
	return cert, fingerprint(ca.Raw), nil
}

// loadCA reads DATA/tls's CA; a key file others can read is refused.
func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	keyPath := filepath.Join(dir, caKey)
	fi, err := os.Stat(keyPath)
	if err != nil {
		return nil, nil, err
	} else if fi.Mode().Perm()&0o077 != 0 {
		return nil, nil, fmt.Errorf("%s is readable by others (mode %v); it must be 0600", keyPath, fi.Mode().Perm())
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cb, err := os.ReadFile(filepath.Join(dir, caCert))
	if err != nil {
		return nil, nil, err
	}
	kp, _ := pem.Decode(kb)
	cp, _ := pem.Decode(cb)
	if kp == nil || cp == nil {
		return nil, nil, fmt.Errorf("%s: the CA's files are not PEM", dir)
	}
	key, err := x509.ParseECPrivateKey(kp.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	ca, err := x509.ParseCertificate(cp.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, caCert), err)
	}
	return ca, key, nil
}

// newCA creates DATA/tls's CA: the key first (0600), then the certificate.
func newCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: tlsPrefix + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(caLife),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	if err := writeSecret(filepath.Join(dir, caKey), string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, caCert), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, err
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// fingerprint is "sha256:" and the hex SHA-256 of a certificate's DER.
func fingerprint(der []byte) string {
	d := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(d[:])
}

// pinned returns a client TLS configuration that accepts exactly cert's
// leaf: the in-process agent dials its own listener, whose name may not be
// one the certificate names.
func pinned(cert tls.Certificate) *tls.Config {
	want := cert.Certificate[0]
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by the pin below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, want) {
				return errors.New("the server's certificate is not the one this process serves")
			}
			return nil
		},
	}
}

// caClient returns an HTTP client that trusts the PEM certificates in
// caFile (and not the system's roots), or nil for the default client when
// caFile is "".
func caClient(caFile string) (*nethttp.Client, *tls.Config, error) {
	if caFile == "" {
		return nil, nil, nil
	}
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	tr := nethttp.DefaultTransport.(*nethttp.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &nethttp.Client{Transport: tr}, cfg, nil
}

// serveTLS returns serve's TLS certificate and what serve prints about
// it, from --tls-cert and --tls-key, or --tls-self-signed; ok is false
// for plain HTTP.
func (o *serveOptions) serveTLS(ln net.Listener) (cert tls.Certificate, ok bool, err error) {
	switch {
	case o.tlsSelfSigned && (o.tlsCert != "" || o.tlsKey != ""):
		return cert, false, fmt.Errorf("--tls-self-signed and --tls-cert/--tls-key exclude each other")
	case o.tlsSelfSigned:
		hosts := append(tlsHosts(ln.Addr()), splitList(o.tlsHosts)...)
		cert, fp, err := selfSignedTLS(o.cfg.data, hosts)
		if err != nil {
			return cert, false, fmt.Errorf("self-signed TLS: %w", err)
		}
		ca := filepath.Join(o.cfg.data, tlsDir, caCert)
		o.log.Info("TLS with the self-signed CA of the data directory; give agents and clients its certificate", "ca", ca, "fingerprint", fp, "names", hosts)
		o.tlsCA = ca
		return cert, true, nil
	case o.tlsCert != "" || o.tlsKey != "":
		if o.tlsCert == "" || o.tlsKey == "" {
			return cert, false, fmt.Errorf("--tls-cert and --tls-key go together")
		}
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return cert, false, fmt.Errorf("TLS certificate: %w", err)
		}
		if cert.Leaf != nil {
			o.log.Info("TLS", "certificate", o.tlsCert, "fingerprint", fingerprint(cert.Leaf.Raw), "expires", cert.Leaf.NotAfter)
		}
		return cert, true, nil
	}
	return cert, false, nil
}

// tlsHosts are the names a self-signed certificate is issued for: the
// loopback names, the host's name, and the listening address, or every
// address of the host when it listens on all.
func tlsHosts(a net.Addr) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return hosts
	}
	if !tcp.IP.IsUnspecified() {
		return append(hosts, tcp.IP.String())
	}
	addrs, _ := net.InterfaceAddrs()
	for _, ad := range addrs {
		if n, ok := ad.(*net.IPNet); ok && !n.IP.IsLoopback() {
			hosts = append(hosts, n.IP.String())
		}
	}
	return hosts
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
