//! Address ranges (`10.0.0.0/8`, `2001:db8::/32`, or one address): the
//! client-address rules of webhooks and hooks files, and the private
//! addresses that completion callbacks may reach.

use std::net::IpAddr;

/// An address range such as `192.30.252.0/22` or `2001:db8::/32`; a bare
/// address is a range of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl Cidr {
    /// Parse `addr/bits` or `addr`.
    ///
    /// # Errors
    /// Not an address, or a prefix longer than the address.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let bad =
            || format!("\"{s}\" is not an address range like \"10.0.0.0/8\" or \"2001:db8::/32\"");
        let (a, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b.parse::<u8>().map_err(|_| bad())?)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        if bits > max {
            return Err(bad());
        }
        Ok(Cidr { addr, bits })
    }

    /// Whether `ip` (IPv4-mapped IPv6 counts as IPv4) is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (net, ip) = (self.addr.to_canonical(), ip.to_canonical());
        match (net, ip) {
            (IpAddr::V4(n), IpAddr::V4(i)) => prefix_eq(
                u128::from(n.to_bits()) << 96,
                u128::from(i.to_bits()) << 96,
                self.bits,
            ),
            (IpAddr::V6(n), IpAddr::V6(i)) => prefix_eq(n.to_bits(), i.to_bits(), self.bits),
            _ => false,
        }
    }
}

/// Whether the first `bits` bits of `a` and `b` are equal.
fn prefix_eq(a: u128, b: u128, bits: u8) -> bool {
    if bits == 0 {
        return true;
    }
    let mask = u128::MAX << (128 - u32::from(bits));
    a & mask == b & mask
}
