package lab

// decapIPv6 says whether `xlb backend --vip` takes IPv6 VIPs.
const decapIPv6 = false
