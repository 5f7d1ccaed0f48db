//! # Which addresses a webhook may reach
//!
//! Webhooks (subscriptions' and chats') are requests a tenant aims at a URL of its choice, made
//! from inside the deployment, so an address that is not on the public internet must never be
//! connected to: the instance metadata service, the VPC, the host's loopback. [`is_public`] is
//! the one rule. It judges an IP literal when a URL is checked (`spec::check_webhook_url`, when
//! the webhook is made and again before each request) and every address a name resolves to
//! (`spool_agents::outbound`'s resolver, for webhooks and MCP servers), so a literal and a name
//! meet the same rule.
//!
//! IPv6 has several ways to carry an IPv4 address, and a request to one of them can end at that
//! IPv4 address (a dual-stack socket, a NAT64 gateway, a 6to4 or Teredo relay): those are judged
//! by the IPv4 address they carry. Every other IPv6 address outside global unicast (`2000::/3`),
//! and the special ranges inside it, is refused outright, whatever it embeds: the IANA
//! special-purpose registries list what is not globally reachable, and nothing a webhook needs
//! lives there.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is on the public internet, so a webhook may connect to it.
///
/// IPv4: not `0.0.0.0/8`, private (RFC 1918), shared (`100.64.0.0/10`), loopback, link-local,
/// IETF protocol assignments (`192.0.0.0/24`), documentation, the old 6to4 relays
/// (`192.88.99.0/24`), benchmarking (`198.18.0.0/15`), multicast, reserved (`240.0.0.0/4`) or
/// broadcast.
///
/// IPv6: an IPv4-mapped address (`::ffff:a.b.c.d`), a NAT64 one of the well-known prefix
/// (`64:ff9b::/96`) and a 6to4 one (`2002::/16`) are public when the IPv4 address they carry
/// is; a Teredo one (`2001::/32`) when both its server's and its client's (obfuscated) addresses
/// are. Otherwise only global unicast (`2000::/3`) is, less the IETF protocol assignments
/// (`2001::/23`: benchmarking, ORCHID, …) and documentation (`2001:db8::/32`, `3fff::/20`). So
/// `::`, `::1`, IPv4-compatible (`::/96`) and IPv4-translated (`::ffff:0:0:0/96`) addresses,
/// discard-only (`100::/64`), local-use NAT64 (`64:ff9b:1::/48`), unique local (`fc00::/7`),
/// link-local (`fe80::/10`), site-local (`fec0::/10`) and multicast (`ff00::/8`) are not.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0
        || ip.is_private()
        || (a == 100 && (64..128).contains(&b))
        || ip.is_loopback()
        || ip.is_link_local()
        || (a == 192 && b == 0 && c == 0)
        || ip.is_documentation()
        || (a == 192 && b == 88 && c == 99)
        || (a == 198 && (18..20).contains(&b))
        || ip.is_multicast()
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match ip.segments() {
        // IPv4-mapped: a dual-stack socket connects to the IPv4 address itself.
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => is_public_v4(v4(hi, lo)),
        // NAT64's well-known prefix: the gateway connects to the IPv4 address.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => is_public_v4(v4(hi, lo)),
        // 6to4: a relay sends it on to the IPv4 address in bits 16 to 47.
        [0x2002, hi, lo, ..] => is_public_v4(v4(hi, lo)),
        // Teredo: the server's IPv4 address, and the client's with every bit inverted.
        [0x2001, 0, server_hi, server_lo, _, _, client_hi, client_lo] => {
            is_public_v4(v4(server_hi, server_lo)) && is_public_v4(v4(!client_hi, !client_lo))
        }
        [first, second, ..] => {
            let global_unicast = first & 0xe000 == 0x2000;
            let protocol_assignments = first == 0x2001 && second < 0x0200;
            let documentation = (first == 0x2001 && second == 0x0db8) || (first == 0x3fff && second < 0x1000);
            global_unicast && !protocol_assignments && !documentation
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_and_what_embeds_them_are_public() {
        // GIVEN addresses of every kind, and whether a webhook may reach each
        let table = [
            // IPv4
            ("8.8.8.8", true),
            ("93.184.216.34", true),
            ("192.0.1.1", true),
            ("192.31.196.1", true),
            ("0.0.0.0", false),
            ("0.1.2.3", false),
            ("10.0.0.1", false),
            ("100.64.0.1", false),
            ("100.127.255.255", false),
            ("127.0.0.1", false),
            ("127.8.9.10", false),
            ("169.254.169.254", false),
            ("172.16.0.1", false),
            ("172.31.255.255", false),
            ("192.0.0.170", false),
            ("192.0.2.1", false),
            ("192.88.99.1", false),
            ("192.168.1.1", false),
            ("198.18.0.1", false),
            ("198.51.100.1", false),
            ("203.0.113.1", false),
            ("224.0.0.1", false),
            ("240.0.0.1", false),
            ("255.255.255.255", false),
            // IPv6 global unicast
            ("2606:4700::1", true),
            ("2a00:1450:4001:80b::200e", true),
            ("2001:4860:4860::8888", true),
            // IPv4-mapped (::ffff:0:0/96): by the IPv4 address
            ("::ffff:8.8.8.8", true),
            ("::ffff:127.0.0.1", false),
            ("::ffff:10.0.0.1", false),
            ("::ffff:169.254.169.254", false),
            // IPv4-translated (::ffff:0:0:0/96): never
            ("::ffff:0:127.0.0.1", false),
            ("::ffff:0:a9fe:a9fe", false),
            ("::ffff:0:8.8.8.8", false),
            // IPv4-compatible (::/96), ::, ::1: never
            ("::", false),
            ("::1", false),
            ("::7f00:1", false),
            ("::a9fe:a9fe", false),
            ("::8.8.8.8", false),
            // NAT64, well-known prefix: by the IPv4 address; local-use: never
            ("64:ff9b::808:808", true),
            ("64:ff9b::7f00:1", false),
            ("64:ff9b::a9fe:a9fe", false),
            ("64:ff9b::1:0:0:7f00:1", false),
            ("64:ff9b:1::808:808", false),
            ("64:ff9b:1::a00:1", false),
            // 6to4: by the IPv4 address
            ("2002:808:808::1", true),
            ("2002:7f00:1::1", false),
            ("2002:a9fe:a9fe::1", false),
            ("2002:c0a8:101::1", false),
            // Teredo: by the server's and the client's (inverted) addresses
            ("2001:0:808:808:8000:ffff:f7f7:f7f7", true),
            ("2001::8000:ffff:80ff:fffe", false),
            ("2001:0:808:808:8000:ffff:80ff:fffe", false),
            ("2001:0:a00:1:8000:ffff:f7f7:f7f7", false),
            ("2001:0:808:808::5601:5601", false),
            // The rest of the IETF protocol assignments, documentation
            ("2001:2::1", false),
            ("2001:10::1", false),
            ("2001:20::1", false),
            ("2001:1ff::1", false),
            ("2001:db8::1", false),
            ("3fff::1", false),
            ("3fff:fff::1", false),
            // Outside global unicast
            ("100::1", false),
            ("fc00::1", false),
            ("fd00::1", false),
            ("fe80::1", false),
            ("febf::1", false),
            ("fec0::1", false),
            ("ff02::1", false),
            ("ff0e::1", false),
            ("5f00::1", false),
            ("4000::1", false),
        ];
        for (address, public) in table {
            // WHEN it is judged
            let ip: IpAddr = address.parse().unwrap();
            // THEN it is public exactly when it should be
            assert_eq!(is_public(ip), public, "{address}");
        }
    }
}
