package source

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/xlbproject/xlb/internal/config"
)

// validate checks d's configuration with the file's own rules
// (config.ValidateConfig on host, through v). A service or peer from the cluster
// that the rules reject is dropped with a problem naming its object, and
// the rest checked again: one bad Service must not hold back the others.
// What cannot be pinned on a cluster object fails the whole configuration
// (the agent then keeps the running one).
func validate(v *config.Validator, d desired, base *config.Config, host *config.Host) (*config.Config, []problem, error) {
	probs := fit(&d, base)
	cfg := d.cfg
	// Every round but the last drops at least one cluster object, so
	// this many rounds always reach a verdict.
	rounds := len(d.serviceFrom) + len(d.peerFrom) + 1
	for range rounds {
		out, err := v.Validate(cfg, config.Env{File: Name, Host: host})
		if err == nil {
			return out, probs, nil
		}
		next, dropped := drop(cfg, err, base, &d)
		if len(dropped) == 0 {
			return nil, probs, fmt.Errorf("the configuration built from the cluster is invalid: %w", err)
		}
		probs = append(probs, dropped...)
		cfg = next
	}
	return nil, probs, errors.New("the configuration built from the cluster is still invalid after dropping every object the checks rejected")
}

// fit drops the cluster's services that would take the configuration
// over the agent's limits (config.MaxServices services,
// dataplane.maxBackends backend entries), newest first: otherwise one
// Service too many would fail the whole configuration, and with it every
// later change.
func fit(d *desired, base *config.Config) []problem {
	nBase := len(base.Services)
	services, entries := nBase, 0
	for _, s := range base.Services {
		entries += len(s.Backends)
	}
	maxEntries := int(base.Dataplane.MaxBackends)
	var probs []problem
	kept := d.cfg.Services[:nBase:nBase]
	var from []string
	for i, s := range d.cfg.Services[nBase:] {
		var why, fix string
		switch {
		case services+1 > config.MaxServices:
			why = fmt.Sprintf("the agent serves at most %d service ports (config.MaxServices), and older ones take them all", config.MaxServices)
			fix = "delete Service ports that xlb need not serve; the limit is fixed, and the newest Services are the ones left out"
		case entries+len(s.Backends) > maxEntries:
			why = fmt.Sprintf("its %d backends would take the data plane over its %d backend entries (dataplane.maxBackends), which older services fill; raise dataplane.maxBackends", len(s.Backends), maxEntries)
			fix = "raise dataplane.maxBackends in the agent's configuration and restart the agents one at a time (the maps are migrated without loss), or serve fewer endpoints"
		}
		if why != "" {
			probs = append(probs, problem{d.serviceFrom[i], fmt.Sprintf("port %s (%s) is not served: %s", s.Key(), s.Name, why), fix})
			continue
		}
		services++
		entries += len(s.Backends)
		kept = append(kept, s)
		from = append(from, d.serviceFrom[i])
	}
	if len(probs) > 0 {
		cfg := *d.cfg
		cfg.Services = kept
		d.cfg, d.serviceFrom = &cfg, from
	}
	return probs
}

func basePeers(base *config.Config) int {
	if base.BGP == nil {
		return 0
	}
	return len(base.BGP.Peers)
}

// errPath finds the list element an error of config.ValidateConfig is about.
var errPath = regexp.MustCompile(`^(services|bgp\.peers)\[(\d+)\](\.|$)`)

// drop removes from cfg the cluster's services and peers that the errors
// of config.ValidateConfig name, and returns the problems saying why; d's origins are
// updated to match. Errors it cannot pin on a cluster object are left
// for the next round: they either go away with the dropped objects (a
// count of errors too many to list) or come back alone, and then fail
// the configuration.
func drop(cfg *config.Config, err error, base *config.Config, d *desired) (*config.Config, []problem) {
	baseServices, basePeers := len(base.Services), basePeers(base)
	badSvc := map[int][]string{}
	badPeer := map[int][]string{}
	for _, e := range flatten(err) {
		var ce *config.Error
		if !errors.As(e, &ce) {
			continue
		}
		m := errPath.FindStringSubmatch(ce.Path)
		if m == nil {
			continue
		}
		i, _ := strconv.Atoi(m[2])
		// The field within the service or peer: the rendered document's
		// indexes mean nothing to whoever reads the problem.
		why := ce.Msg
		if field := ce.Path[len(m[0]):]; field != "" {
			if m[1] == "bgp.peers" {
				field = specField(field)
			}
			why = field + ": " + why
		}
		switch {
		case m[1] == "services" && i >= baseServices && i-baseServices < len(d.serviceFrom):
			badSvc[i] = append(badSvc[i], why)
		case m[1] == "bgp.peers" && i >= basePeers && i-basePeers < len(d.peerFrom):
			badPeer[i] = append(badPeer[i], why)
		}
	}
	next := *cfg
	var probs []problem
	if len(badSvc) > 0 {
		next.Services = nil
		var from []string
		for i, s := range cfg.Services {
			if why, bad := badSvc[i]; bad {
				probs = append(probs, problem{d.serviceFrom[i-baseServices], fmt.Sprintf("port %s (%s) is not served: %s", s.Key(), s.Name, strings.Join(why, "; ")),
					"correct what the reason names: the Service's port, its address (from its AddressPool) or annotations, or the service it collides with; the port is served once the checks pass"})
				continue
			}
			next.Services = append(next.Services, s)
			if i >= baseServices {
				from = append(from, d.serviceFrom[i-baseServices])
			}
		}
		d.serviceFrom = from
	}
	if len(badPeer) > 0 {
		b := *cfg.BGP
		b.Peers = nil
		var from []string
		for i, p := range cfg.BGP.Peers {
			if why, bad := badPeer[i]; bad {
				probs = append(probs, problem{d.peerFrom[i-basePeers], fmt.Sprintf("peer %s is left out: %s", p.Address, strings.Join(why, "; ")),
					"correct the field the reason names in the BGPPeer's spec (kubectl edit bgppeer NAME) or its password Secret; the peer is taken in as soon as that changes"})
				continue
			}
			b.Peers = append(b.Peers, p)
			if i >= basePeers {
				from = append(from, d.peerFrom[i-basePeers])
			}
		}
		d.peerFrom = from
		next.BGP = &b
		if len(b.Peers) == 0 && base.BGP == nil {
			// The section came from the BGPPeers alone.
			next.BGP = nil
		}
	}
	return &next, probs
}

// peerSpecFields maps the fields of a configuration's peer to those of
// the BGPPeer spec they come from.
var peerSpecFields = map[string]string{
	"address": "peerAddress", "asn": "peerASN", "port": "peerPort", "password": "passwordSecret",
	"holdTime": "holdTime", "keepalive": "keepaliveTime", "multihop": "ebgpMultiHop", "passive": "passive", "bfd": "bfd",
	"maxPrefixes": "maxPrefixes",
}

// specField names a peer's field (bfd.minRx) as the BGPPeer spec does
// (spec.bfd.minRx).
func specField(field string) string {
	head, tail, _ := strings.Cut(field, ".")
	if f, ok := peerSpecFields[head]; ok {
		head = f
	}
	if tail != "" {
		return "spec." + head + "." + tail
	}
	return "spec." + head
}

// flatten lists the errors that errors.Join put together.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return slices.Clone(j.Unwrap())
	}
	return []error{err}
}
