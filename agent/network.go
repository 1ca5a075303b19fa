package agent

import (
	"context"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/egress"
)

// network gives a lease whose egress mode is not none its network: a
// namespace (egress.Setup) whose only reachable address is the agent's
// broker, which admits what the computer's policy allows. The sandbox
// joins the namespace (spec.NetNS), and commands find the broker in the
// proxy variables. Setup and Serve are idempotent, so a restarted agent
// calls network again for a lease it takes over. A lease with egress none
// gets nothing: the provider gives it a namespace with only loopback.
func (l *lease) network(ctx context.Context, spec *bothy.LeaseSpec) error {
	pol := l.rec.Egress
	if pol.Mode == "" || pol.Mode == bothy.EgressNone {
		return nil
	}
	eg := l.a.cfg.Egress
	if eg == nil {
		return bothy.Errorf(bothy.EUNAVAILABLE, "egress %q needs an agent with an egress broker, and this agent has none", pol.Mode)
	}
	n, err := egress.Setup(ctx, eg.Network, l.rec.LeaseID)
	if err != nil {
		return err
	}
	if _, err := eg.Broker.Serve(l.rec.LeaseID, n.Proxy(), pol); err != nil {
		return err
	}
	spec.NetNS = n.Path
	proxy := n.ProxyURL()
	spec.Env = map[string]string{
		"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
		"NO_PROXY": "localhost,127.0.0.1", "no_proxy": "localhost,127.0.0.1",
	}
	return nil
}

// removeNetwork closes the lease's broker listener and removes its
// namespace, returning what could not be removed.
func (l *lease) removeNetwork(ctx context.Context) []string {
	pol := l.rec.Egress
	eg := l.a.cfg.Egress
	if pol.Mode == "" || pol.Mode == bothy.EgressNone || eg == nil {
		return nil
	}
	var residue []string
	if err := eg.Broker.Close(l.rec.LeaseID); err != nil {
		residue = append(residue, "egress broker: "+err.Error())
	}
	left, err := egress.Teardown(ctx, eg.Network, l.rec.LeaseID)
	residue = append(residue, left...)
	if err != nil {
		residue = append(residue, "egress network: "+err.Error())
	}
	return residue
}

// netBytes is what the broker relayed for the lease so far.
func (l *lease) netBytes() int64 {
	return l.a.cfg.Egress.Broker.Bytes(l.rec.LeaseID)
}
