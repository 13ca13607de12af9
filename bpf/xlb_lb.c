// SPDX-License-Identifier: GPL-2.0
/* xlb LB program: XDP on an xlb node's ingress interface. */
#include "xlb_lb.h"

SEC("xdp")
int xlb_lb_prog(struct xdp_md *ctx)
{
	return xlb_lb(ctx);
}

/* The control plane's sweep of the NAT sessions (ExpireSessions in
 * internal/dataplane/lb) reads the tables in batches and passes the
 * reverse keys of the sessions it read past their timeout here, up to
 * LBNAT_REAP_BATCH at a time (BPF_PROG_RUN). Each one still past it now,
 * by the packet path's own rule (lbnat_dead, with the client's side's
 * stamp joined in), is reaped as the packet path reaps one it meets
 * (lbnat_reap: the forward entry if it still names the session, then the
 * claim; counted as expired, and without a reply if it had none). One
 * system call per batch, and each session's lookup and delete as close
 * together as the packet path's, instead of several system calls per
 * session from user space. */
#define LBNAT_REAP_BATCH 64

/* The packet path's clock is the coarse one (bpf_ktime_get_coarse_ns),
 * which this program type may not read; the fine clock runs up to a tick
 * ahead of it (10 ms at HZ=100). Taken off, so that no session is reaped
 * here that the packet path would still find alive. */
#define LBNAT_REAP_SLACK_NS 10000000ULL

struct lbnat_reap_args {
	__u32 n;         /* keys in use, at most LBNAT_REAP_BATCH */
	__u32 est;       /* 1: the established tables; 0: the embryonic ones */
	__u64 reaped;    /* out: bit i, key i's session was reaped */
	__u64 alive;     /* out: bit i, key i's session lives on */
	struct lbnat_key keys[LBNAT_REAP_BATCH];
};

_Static_assert(sizeof(struct lbnat_reap_args) == 24 + 40 * LBNAT_REAP_BATCH, "lbnat_reap_args layout");

/* 1: reverse key rk's session was past its timeout and is reaped; 2: it
 * lives; 0: there is none. */
static __noinline int lbnat_reap_key(const struct lbnat_key *rk, int est)
{
	struct lbnat_cfg *c = lbnat_config();
	struct lbnat_session *s;
	struct lbnat_key fk;

	if (!c)
		return 0;
	if (est)
		s = bpf_map_lookup_elem(&nat_rev, rk);
	else
		s = bpf_map_lookup_elem(&nat_rev_syn, rk);
	if (!s)
		return 0;
	if (!lbnat_dead(c, rk, s, est, bpf_ktime_get_ns() - LBNAT_REAP_SLACK_NS, &fk))
		return 2;
	lbnat_reap(rk, s, est, &fk);
	return 1;
}

SEC("syscall")
int xlb_nat_reap(struct lbnat_reap_args *a)
{
	struct lbnat_key k;
	__u32 n = a->n;
	int est = a->est != 0;
	__u64 reaped = 0, alive = 0;

	/* Unrolled: the context is read at constant offsets only. */
#pragma unroll
	for (int i = 0; i < LBNAT_REAP_BATCH; i++) {
		int r;

		if (i < n) {
			__builtin_memcpy(&k, &a->keys[i], sizeof(k));
			r = lbnat_reap_key(&k, est);
			if (r == 1)
				reaped |= 1ULL << i;
			else if (r == 2)
				alive |= 1ULL << i;
		}
	}
	a->reaped = reaped;
	a->alive = alive;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
