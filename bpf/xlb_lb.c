// SPDX-License-Identifier: GPL-2.0
/* xlb LB program: XDP on an xlb node's ingress interface. */
#include "xlb_lb.h"

SEC("xdp")
int xlb_lb_prog(struct xdp_md *ctx)
{
	return xlb_lb(ctx);
}

char LICENSE[] SEC("license") = "GPL";
