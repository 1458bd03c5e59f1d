//! A localnet's loopback ports, drawn where nothing else on the machine takes them by chance.
//!
//! A node's consensus and client ports are written into the genesis before any node starts,
//! and a killed node binds its ports again on restart. A port the kernel hands out for
//! `bind(0)` (its ephemeral range) is free only until the next `bind(0)`: the localnet's own
//! loopback proxies ([`crate::netfault`]), another localnet or any test binding port 0 may take
//! it between the genesis and the node's bind, and the node then cannot listen (it stops with
//! `NodeError::Config`, the engine adapter's port probe). So ports are drawn *below* the
//! ephemeral range, where `bind(0)` never reaches, at random (two localnets started at once draw
//! different ports), each checked free by binding it, and the listeners are held until the
//! nodes are spawned ([`Reserved`]).

use std::net::TcpListener;

/// The lowest port a localnet draws (above the registered ports most services use).
pub const PORT_FLOOR: u16 = 10_000;

/// The kernel's ephemeral range's first port where it cannot be read (Linux's default; other
/// systems start theirs higher, at 49152).
pub const DEFAULT_EPHEMERAL_FLOOR: u16 = 32_768;

/// Draws before a localnet gives up finding a free port.
pub const PORT_DRAWS: usize = 512;

/// Fewer ports than this between [`PORT_FLOOR`] and the ephemeral range: ports are asked of the
/// kernel (`bind(0)`) instead, and the race described in the module docs stays possible (traced).
const MIN_RANGE: u16 = 1_024;

/// Listeners holding a localnet's ports between the genesis and its nodes' start: drop them
/// right before spawning the nodes.
#[derive(Debug, Default)]
pub struct Reserved {
    /// Held, never read: dropping them frees the ports.
    pub(super) _held: Vec<TcpListener>,
}

/// The first port of the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`),
/// or [`DEFAULT_EPHEMERAL_FLOOR`] where it cannot be read or parsed.
pub fn ephemeral_floor() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(DEFAULT_EPHEMERAL_FLOOR)
}

/// Binds a free loopback port in `[floor, ceiling)`, drawn by `draw`; `bind(0)` when the range
/// holds fewer than 1,024 ports.
///
/// # Errors
/// No free port after [`PORT_DRAWS`] draws (the last bind's error), or `bind(0)` failing.
pub fn reserve_port(
    draw: &mut impl FnMut() -> u64,
    floor: u16,
    ceiling: u16,
) -> std::io::Result<TcpListener> {
    let span = ceiling.saturating_sub(floor);
    if span < MIN_RANGE {
        tracing::warn!(
            floor,
            ceiling,
            "too few ports below the ephemeral range: asking the kernel for ports"
        );
        return TcpListener::bind("127.0.0.1:0");
    }
    let mut last = None;
    for _ in 0..PORT_DRAWS {
        let offset = u16::try_from(draw() % u64::from(span)).unwrap_or(0);
        let port = floor.saturating_add(offset);
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    let e = last.unwrap_or_else(|| std::io::Error::other("no port drawn"));
    tracing::error!(floor, ceiling, error = %e, "no free localnet port");
    Err(std::io::Error::new(
        e.kind(),
        format!("no free loopback port in {floor}..{ceiling} after {PORT_DRAWS} draws: {e}"),
    ))
}

/// A splitmix64 stream seeded from the clock, the process and a count within it: two localnets
/// of one seed started together draw different ports.
pub fn port_draws() -> impl FnMut() -> u64 {
    use sha2::Digest as _;
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let h = sha2::Sha256::new()
        .chain_update(crate::core::now_ms().to_le_bytes())
        .chain_update(std::process::id().to_le_bytes())
        .chain_update(
            COUNT
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                .to_le_bytes(),
        )
        .finalize();
    let mut s = u64::from_le_bytes(h[..8].try_into().unwrap_or([0; 8]));
    move || {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_drawn_below_the_ephemeral_range_and_distinct_while_held() {
        let ceiling = ephemeral_floor();
        let mut draw = port_draws();
        let held: Vec<TcpListener> = (0..16)
            .map(|_| reserve_port(&mut draw, PORT_FLOOR, ceiling).unwrap())
            .collect();
        let mut ports: Vec<u16> = held
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        if ceiling.saturating_sub(PORT_FLOOR) >= MIN_RANGE {
            assert!(
                ports.iter().all(|&p| (PORT_FLOOR..ceiling).contains(&p)),
                "{ports:?} outside {PORT_FLOOR}..{ceiling}"
            );
        }
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 16);
    }

    #[test]
    fn a_taken_port_is_skipped_and_the_next_draw_taken() {
        let mut draw = port_draws();
        let taken = reserve_port(&mut draw, PORT_FLOOR, 20_000).unwrap();
        let taken_port = taken.local_addr().unwrap().port();
        // The first draw lands on the taken port, the second one past it.
        let offsets = [
            u64::from(taken_port - PORT_FLOOR),
            u64::from(taken_port - PORT_FLOOR) + 1,
        ];
        let mut i = 0;
        let mut scripted = || {
            let o = offsets[i.min(1)];
            i += 1;
            o
        };
        match reserve_port(&mut scripted, PORT_FLOOR, 20_001) {
            Ok(l) => {
                assert_eq!(l.local_addr().unwrap().port(), taken_port + 1);
                assert_eq!(i, 2, "one draw refused, the next bound");
            }
            // The port after it was taken by something else on the machine: every draw failed.
            Err(e) => assert!(e.to_string().contains("after 512 draws"), "{e}"),
        }
    }

    #[test]
    fn no_free_port_is_a_typed_error_naming_the_range() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let floor = port.saturating_sub(1);
        let mut same = || 1u64; // always `port`
        let e = reserve_port(&mut same, floor, floor.saturating_add(MIN_RANGE)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains("after 512 draws"), "{e}");
    }

    #[test]
    fn a_range_too_small_falls_back_to_the_kernel() {
        let mut never = || -> u64 { panic!("no draw expected") };
        let l = reserve_port(&mut never, 40_000, 40_010).unwrap();
        assert_ne!(l.local_addr().unwrap().port(), 0);
    }
}
