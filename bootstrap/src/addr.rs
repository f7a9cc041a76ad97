//! Interface addresses marked as ferrolb's with the netlink address protocol field
//! (IFA_PROTO, Linux ≥ 5.18), through rtnetlink. Only addresses carrying our mark are
//! ever removed: an equal address someone else configured is left alone.

use std::net::IpAddr;

use futures::TryStreamExt;
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressProtocol,
};

/// IFA_PROTO value marking ferrolb's addresses (0–3 are the kernel's; any other value is
/// free for user space). The speaker's L2 module must use the same value.
pub const FERROLB_ADDR_PROTO: u8 = 0x66;

/// Netlink failures, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum AddrError {
    /// The interface does not exist.
    #[error("interface {0:?} not found")]
    NoInterface(String),
    /// A netlink request failed.
    #[error("netlink: {what}: {detail}")]
    Netlink {
        /// The request.
        what: String,
        /// The kernel's or the library's answer.
        detail: String,
    },
}

/// What [`Addresses::ensure`] found or did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// We added it now.
    Added,
    /// It was already there with our mark.
    AlreadyOurs,
    /// It is there but not ours (another tool or an admin put it there); left alone.
    Foreign,
}

/// A netlink connection for address changes in the current network namespace.
#[derive(Clone)]
pub struct Addresses {
    handle: rtnetlink::Handle,
}

impl std::fmt::Debug for Addresses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Addresses")
    }
}

fn nl(what: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> AddrError {
    let what = what.into();
    move |e| AddrError::Netlink { what, detail: e.to_string() }
}

/// Host prefix length of an address (/32 or /128).
pub fn host_len(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

impl Addresses {
    /// Opens a netlink socket (in the namespace of the calling thread) and spawns its task.
    pub fn connect() -> Result<Self, AddrError> {
        let (conn, handle, _) = rtnetlink::new_connection()
            .map_err(|e| AddrError::Netlink { what: "open socket".into(), detail: e.to_string() })?;
        tokio::spawn(conn);
        Ok(Self { handle })
    }

    /// The index of interface `name`.
    pub async fn index(&self, name: &str) -> Result<u32, AddrError> {
        Ok(self.link(name).await?.0)
    }

    /// The index and the MAC address (None: the link has none) of interface `name`.
    pub async fn link(&self, name: &str) -> Result<(u32, Option<[u8; 6]>), AddrError> {
        let mut links = self.handle.link().get().match_name(name.to_owned()).execute();
        match links.try_next().await {
            Ok(Some(l)) => {
                let mac = l.attributes.iter().find_map(|a| match a {
                    netlink_packet_route::link::LinkAttribute::Address(m) => {
                        <[u8; 6]>::try_from(m.as_slice()).ok()
                    }
                    _ => None,
                });
                Ok((l.header.index, mac))
            }
            Ok(None) => Err(AddrError::NoInterface(name.to_owned())),
            Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -19 => {
                Err(AddrError::NoInterface(name.to_owned()))
            }
            Err(e) => Err(nl(format!("look up {name}"))(e)),
        }
    }

    /// The addresses whose neighbour entry (ARP / NDP cache, every interface) holds
    /// link-layer address `mac`: who sent a frame from that MAC.
    pub async fn neighbours_at(&self, mac: [u8; 6]) -> Result<Vec<IpAddr>, AddrError> {
        use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute};
        let mut out = Vec::new();
        let mut s = self.handle.neighbours().get().execute();
        while let Some(n) = s.try_next().await.map_err(nl("list neighbours"))? {
            let at_mac = n
                .attributes
                .iter()
                .any(|a| matches!(a, NeighbourAttribute::LinkLayerAddress(m) if m.as_slice() == mac));
            if !at_mac {
                continue;
            }
            out.extend(n.attributes.iter().filter_map(|a| match a {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)) => Some(IpAddr::V4(*ip)),
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(ip)) => Some(IpAddr::V6(*ip)),
                _ => None,
            }));
        }
        Ok(out)
    }

    /// Every address message for `ip` on interface `index`.
    async fn find(&self, index: u32, ip: IpAddr) -> Result<Vec<AddressMessage>, AddrError> {
        let mut out = Vec::new();
        let mut s = self.handle.address().get().set_link_index_filter(index).execute();
        while let Some(m) = s.try_next().await.map_err(nl("list addresses"))? {
            if m.header.index == index && address_of(&m) == Some(ip) {
                out.push(m);
            }
        }
        Ok(out)
    }

    /// Adds `ip/len` to the interface with our mark unless it is there already.
    pub async fn ensure(&self, ifname: &str, ip: IpAddr, prefix_len: u8) -> Result<Ensured, AddrError> {
        let index = self.index(ifname).await?;
        let found = self.find(index, ip).await?;
        if let Some(m) = found.first() {
            return Ok(if is_ours(m) { Ensured::AlreadyOurs } else { Ensured::Foreign });
        }
        let mut req = self.handle.address().add(index, ip, prefix_len);
        let msg = req.message_mut();
        msg.attributes.push(AddressAttribute::Protocol(AddressProtocol::Other(FERROLB_ADDR_PROTO)));
        if ip.is_ipv6() {
            // No duplicate address detection: a VIP moving between nodes must work at once
            // (and DAD would fail it while the old owner still answers).
            msg.header.flags |= AddressHeaderFlags::Nodad;
            msg.attributes.push(AddressAttribute::Flags(AddressFlags::Nodad));
        }
        match req.execute().await {
            Ok(()) => Ok(Ensured::Added),
            // Added by someone else between our look and our add.
            Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -17 => {
                let found = self.find(index, ip).await?;
                Ok(if found.iter().any(is_ours) { Ensured::AlreadyOurs } else { Ensured::Foreign })
            }
            Err(e) => Err(nl(format!("add {ip}/{prefix_len} to {ifname}"))(e)),
        }
    }

    /// Removes `ip` from the interface only if it carries our mark; true if removed.
    pub async fn release(&self, ifname: &str, ip: IpAddr) -> Result<bool, AddrError> {
        let index = self.index(ifname).await?;
        let mut removed = false;
        for m in self.find(index, ip).await? {
            if is_ours(&m) {
                self.handle
                    .address()
                    .del(m)
                    .execute()
                    .await
                    .map_err(nl(format!("remove {ip} from {ifname}")))?;
                removed = true;
            }
        }
        Ok(removed)
    }

    /// The interface whose connected subnet holds `ip` (the L2 default interface).
    pub async fn interface_for(&self, ip: IpAddr) -> Result<Option<String>, AddrError> {
        let mut s = self.handle.address().get().execute();
        let mut index = None;
        while let Some(m) = s.try_next().await.map_err(nl("list addresses"))? {
            let Some(a) = address_of(&m) else { continue };
            if is_ours(&m) || a == ip {
                continue;
            }
            if let Ok(net) = ipnet::IpNet::new(a, m.header.prefix_len)
                && net.prefix_len() < host_len(a)
                && net.contains(&ip)
            {
                index = Some(m.header.index);
                break;
            }
        }
        let Some(index) = index else { return Ok(None) };
        let mut links = self.handle.link().get().match_index(index).execute();
        let link = links.try_next().await.map_err(nl("look up interface"))?;
        Ok(link.and_then(|l| {
            l.attributes.into_iter().find_map(|a| match a {
                netlink_packet_route::link::LinkAttribute::IfName(n) => Some(n),
                _ => None,
            })
        }))
    }
}

fn address_of(m: &AddressMessage) -> Option<IpAddr> {
    // IFA_LOCAL is the interface's own address (IFA_ADDRESS is the peer on point-to-point links).
    let local = m.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    local.or_else(|| {
        m.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    })
}

/// Whether an address carries ferrolb's IFA_PROTO mark.
pub fn is_ours(m: &AddressMessage) -> bool {
    m.attributes
        .iter()
        .any(|a| matches!(a, AddressAttribute::Protocol(p) if u8::from(*p) == FERROLB_ADDR_PROTO))
}

/// Sets `net.ipv4.conf.all.arp_ignore=1` and `arp_announce=2`, so a VIP on `lo` is not
/// answered for by ARP on every interface (BGP mode).
pub fn set_arp_sysctls() -> std::io::Result<()> {
    std::fs::write("/proc/sys/net/ipv4/conf/all/arp_ignore", "1")?;
    std::fs::write("/proc/sys/net/ipv4/conf/all/arp_announce", "2")
}
