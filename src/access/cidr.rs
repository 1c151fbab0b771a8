//! Address ranges (`10.0.0.0/8`, `2001:db8::/32`, or one address): the
//! client-address rules of signed endpoints and hooks files, and the private
//! addresses that completion callbacks may reach.
//!
//! IPv4-mapped IPv6 (`::ffff:10.1.2.3`) is IPv4 on both sides: a client of
//! a dual-stack listener (`[::]`) reaches trigd as such an address, and a
//! range written that way (`::ffff:10.0.0.0/104`) is the IPv4 range it
//! names (`10.0.0.0/8`), as Go's `net.IPNet` reads both (adnanh/webhook's
//! `ip-whitelist`).

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
        Ok(canonical(addr, bits))
    }

    /// Whether `ip` (IPv4-mapped IPv6 counts as IPv4) is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
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

/// The range `addr/bits`, an IPv4-mapped one as IPv4 (its last 32 bits
/// under the prefix). A mapped prefix shorter than 96 bits does not keep
/// the `::ffff:` part whole, so it names no IPv4 range and stays IPv6 (Go
/// reads it so too).
fn canonical(addr: IpAddr, bits: u8) -> Cidr {
    match addr {
        IpAddr::V6(v6) if bits >= 96 => match v6.to_ipv4_mapped() {
            Some(v4) => Cidr {
                addr: IpAddr::V4(v4),
                bits: bits - 96,
            },
            None => Cidr { addr, bits },
        },
        _ => Cidr { addr, bits },
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_mapped_addresses_are_ipv4_on_both_sides() {
        let v4 = Cidr::parse("10.0.0.0/8").unwrap();
        let mapped = Cidr::parse("::ffff:10.0.0.0/104").unwrap();
        assert_eq!(mapped, v4, "the same range");
        for range in [v4, mapped] {
            assert!(range.contains(ip("10.1.2.3")));
            assert!(range.contains(ip("::ffff:10.1.2.3")), "a dual-stack client");
            assert!(!range.contains(ip("11.0.0.1")));
            assert!(!range.contains(ip("::ffff:11.0.0.1")));
            assert!(!range.contains(ip("::a01:203")), "IPv4-compatible is IPv6");
        }
        let one = Cidr::parse("::ffff:127.0.0.1").unwrap();
        assert!(one.contains(ip("127.0.0.1")) && !one.contains(ip("127.0.0.2")));
        assert!(Cidr::parse("::ffff:0.0.0.0/96")
            .unwrap()
            .contains(ip("8.8.8.8")));
        // Shorter than the ::ffff: part: an IPv6 range, no IPv4 in it.
        let short = Cidr::parse("::ffff:0:0/80").unwrap();
        assert!(!short.contains(ip("10.1.2.3")) && short.contains(ip("::1")));
    }
}
