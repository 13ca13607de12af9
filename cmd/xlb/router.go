package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/internal/bfd"
	"github.com/xlbproject/xlb/testbed/router"
)

// labRouter runs the lab's embedded upstream router in the current
// network namespace (hidden: the lab starts it in its router namespace
// with `xlb netns-exec NS -- xlb lab router ...`).
func labRouter(args []string) error {
	fs := flag.NewFlagSet("xlb lab router", flag.ContinueOnError)
	asn := fs.Uint("asn", 0, "the router's AS number (required)")
	routerID := fs.String("router-id", "", "BGP router ID, an IPv4 address (default: --listen)")
	listen := fs.String("listen", "", "IPv4 address to accept BGP sessions on (required)")
	listen6 := fs.String("listen6", "", "IPv6 `address` to accept BGP sessions on too (needed for IPv6 --neighbors)")
	port := fs.Int("port", 179, "TCP port to accept BGP sessions on")
	neighbors := fs.String("neighbors", "", "comma-separated `prefixes` xlb nodes may connect from, without configuring each (required)")
	peerASN := fs.Uint("peer-asn", 0, "the nodes' AS number: eBGP (default: --asn, iBGP)")
	holdTime := fs.Duration("hold-time", router.DefaultHoldTime, "BGP hold time offered to the nodes (whole seconds, at least 3s)")
	bfdSpec := fs.String("bfd", "", "BFD towards every established node: `minRx,minTx,multiplier`, e.g. 100ms,100ms,3")
	status := fs.String("status", "", "unix socket `path` serving the router's status (peers, routes) as JSON")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(*logFormat, *logLevel)
	if err != nil {
		return err
	}
	cfg := router.Config{Port: *port, HoldTime: *holdTime, StatusSocket: *status, Log: log}
	if cfg.ASN, err = asnFlag("asn", *asn); err != nil {
		return err
	}
	if cfg.PeerASN, err = asnFlag("peer-asn", *peerASN); err != nil {
		return err
	}
	if cfg.Listen, err = addrFlag("listen", *listen); err != nil {
		return err
	}
	if *listen6 != "" {
		if cfg.Listen6, err = netip.ParseAddr(*listen6); err != nil || !cfg.Listen6.Is6() {
			return fmt.Errorf("--listen6 %q: want an IPv6 address", *listen6)
		}
	}
	if *routerID != "" {
		if cfg.RouterID, err = addrFlag("router-id", *routerID); err != nil {
			return err
		}
	}
	for _, s := range strings.Split(*neighbors, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("--neighbors %q: %q is not a prefix (e.g. 10.0.1.0/24 or fd00:1::/64)", *neighbors, s)
		}
		cfg.Neighbors = append(cfg.Neighbors, p)
	}
	if cfg.ASN == 0 {
		return errors.New("--asn is required (e.g. --asn 65000)")
	}
	if len(cfg.Neighbors) == 0 {
		return errors.New("--neighbors is required: the prefixes xlb nodes connect from (e.g. --neighbors 10.0.1.0/24)")
	}
	if *bfdSpec != "" {
		b, err := parseBFD(*bfdSpec)
		if err != nil {
			return err
		}
		cfg.BFD = &b
	}
	r, err := router.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return r.Run(ctx)
}

// parseBFD reads --bfd: minRx,minTx,multiplier.
func parseBFD(s string) (bfd.Config, error) {
	var c bfd.Config
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return c, fmt.Errorf("--bfd %q: want minRx,minTx,multiplier, e.g. 100ms,100ms,3", s)
	}
	var err error
	if c.MinRx, err = time.ParseDuration(strings.TrimSpace(parts[0])); err != nil || c.MinRx <= 0 {
		return c, fmt.Errorf("--bfd %q: minRx %q: want a positive duration such as 100ms", s, parts[0])
	}
	if c.MinTx, err = time.ParseDuration(strings.TrimSpace(parts[1])); err != nil || c.MinTx <= 0 {
		return c, fmt.Errorf("--bfd %q: minTx %q: want a positive duration such as 100ms", s, parts[1])
	}
	mult, err := strconv.Atoi(strings.TrimSpace(parts[2]))
	if err != nil || mult < 1 || mult > 255 {
		return c, fmt.Errorf("--bfd %q: multiplier %q: want 1 to 255", s, parts[2])
	}
	c.Multiplier = uint8(mult)
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("--bfd %q: %w", s, err)
	}
	return c, nil
}

func asnFlag(name string, v uint) (uint32, error) {
	if v > 1<<32-1 {
		return 0, fmt.Errorf("--%s %d: an AS number is at most %d", name, v, uint32(1<<32-1))
	}
	return uint32(v), nil
}

func addrFlag(name, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, fmt.Errorf("--%s is required", name)
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("--%s %q: want an IPv4 address", name, s)
	}
	return a, nil
}
