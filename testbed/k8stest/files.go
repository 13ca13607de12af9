package k8stest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// certValidity outlives any test run; the CA dies with the temp dir.
const certValidity = 7 * 24 * time.Hour

// managerUser is kube-controller-manager's identity. With
// --use-service-account-credentials=false every controller acts as this
// user, so it needs every controller's rights: system:masters.
const managerUser = "system:kube-controller-manager"

// files are the paths and secrets Start writes into the temp dir.
type files struct {
	caPEM        []byte
	caFile       string
	servingCert  string // for 127.0.0.1, signed by the CA
	servingKey   string
	saKey        string // service-account token signing key
	saPub        string // its public key
	tokenFile    string
	adminToken   string
	managerToken string
}

func writeFiles(dir string, serviceIP netip.Addr) (*files, error) {
	ca, caKey, caPEM, err := newCA()
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := newServingCert(ca, caKey, serviceIP)
	if err != nil {
		return nil, err
	}
	saKeyPEM, saPubPEM, err := newKeyPair()
	if err != nil {
		return nil, err
	}
	f := &files{
		caPEM:        caPEM,
		caFile:       filepath.Join(dir, "ca.crt"),
		servingCert:  filepath.Join(dir, "serving.crt"),
		servingKey:   filepath.Join(dir, "serving.key"),
		saKey:        filepath.Join(dir, "sa.key"),
		saPub:        filepath.Join(dir, "sa.pub"),
		tokenFile:    filepath.Join(dir, "tokens.csv"),
		adminToken:   rand.Text(),
		managerToken: rand.Text(),
	}
	// kube-apiserver's static token file: token,user,uid,"group,...".
	tokens := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n%s,%s,%s,\"system:masters\"\n",
		f.adminToken, AdminUser, AdminUser, f.managerToken, managerUser, managerUser)
	for _, w := range []struct {
		path string
		data []byte
	}{
		{f.caFile, caPEM},
		{f.servingCert, certPEM},
		{f.servingKey, keyPEM},
		{f.saKey, saKeyPEM},
		{f.saPub, saPubPEM},
		{f.tokenFile, []byte(tokens)},
	} {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func newCA() (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl, err := template("xlb-test-ca")
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newServingCert returns a certificate for loopback and the names and
// address in-cluster clients use for the API server.
func newServingCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, serviceIP netip.Addr) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("serving key: %w", err)
	}
	tmpl, err := template("kube-apiserver")
	if err != nil {
		return nil, nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, serviceIP.AsSlice()}
	tmpl.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("serving key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// newKeyPair returns a PKCS#8 P-256 key and its PKIX public key: the
// service-account token signing key and the key tokens are verified with.
func newKeyPair() (keyPEM, pubPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("service-account key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("service-account key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), nil
}

func template(cn string) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour), // tolerate clock skew
		NotAfter:     now.Add(certValidity),
	}, nil
}

// writeKubeconfig writes DIR/NAME.kubeconfig for a token user and
// returns its path. The CA is inlined so that the file stands alone.
func writeKubeconfig(dir, name, server string, caPEM []byte, token string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Config
clusters:
- name: xlb-test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: xlb-test
  context:
    cluster: xlb-test
    user: %s
current-context: xlb-test
`, server, base64.StdEncoding.EncodeToString(caPEM), name, token, name)
	path := filepath.Join(dir, name+".kubeconfig")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return "", err
	}
	return path, nil
}
